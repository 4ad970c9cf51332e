"""The local decision service (``loopwarden sidecar``): a runner client served over loopback HTTP/JSON.

Imports neither the worker nor Faust: it runs on the core install plus httptools
(and uvloop where it builds: the ``sidecar`` extra). See streams/sidecar/SIDECAR.md.
"""
