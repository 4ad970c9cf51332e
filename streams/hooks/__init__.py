"""Coding-agent hooks: ``loopwarden hook HOST`` answers a host's tool hooks from the local decision service.

Standard library only (http.client, json): the host starts the hook twice per tool call,
so this package imports nothing of the project's heavy parts (HOOKS.md).
"""
