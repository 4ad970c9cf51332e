"""Import-linter contract types of our own (``contract_types`` in pyproject.toml).

``standard_library_only``: the modules of ``source_modules`` (and their
descendants) import nothing but the standard library (``sys.stdlib_module_names``)
and ``allowed_modules``. The hooks need it: a coding agent starts the hook twice
per tool call with ``python -S``, where no third-party package is on the path at
all. A forbidden contract could only list the packages known today.
"""

from __future__ import annotations

import sys

import grimp
from importlinter import Contract, ContractCheck, fields, output


class StandardLibraryOnly(Contract):
    type_name = "standard_library_only"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        allowed = [m.name for m in self.allowed_modules or []]
        broken = []
        for source in self.source_modules:
            for importer in sorted({source.name} | graph.find_descendants(source.name)):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if imported.partition(".")[0] in sys.stdlib_module_names:
                        continue
                    if any(imported == a or imported.startswith(a + ".") for a in allowed):
                        continue
                    lines = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
                    broken.append((importer, imported, lines))
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["broken"]:
            where = ", ".join(f"l.{n}" for n in lines)
            output.print_error(f"{importer} imports {imported} ({where}): not the standard library", bold=False)
            output.new_line()
