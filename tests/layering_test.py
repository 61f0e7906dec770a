#!/usr/bin/env python3
"""Dependencies between the top-level source folders point one way (docs/architecture.md).

Every `#include "folder/..."` in a source folder must name the folder itself or one it may depend
on (LAYERS below, the table of docs/architecture.md), and no CMakeLists.txt may compile a source
file of another folder. Tests, docs and scripts are not checked.
  layering_test.py SOURCE_DIR
"""
import os
import re
import sys

# folder -> the folders its code may include. Acyclic: checked below.
LAYERS = {
    "common": set(),
    "checkpoint": {"common"},
    "tokenizer": {"common"},
    "jinja": {"common", "tokenizer"},
    "model_files": {"common", "checkpoint", "tokenizer"},
    "policy": {"common", "checkpoint"},
    "kernels": {"common"},
    "control": {"common", "policy"},
    "worker": {"common", "checkpoint", "tokenizer", "model_files", "policy", "kernels", "control"},
    "models": {"common", "checkpoint", "tokenizer", "worker"},
    "monitoring": {"common"},
    "api": {"common", "monitoring"},
    "rpc": {"common", "api"},
    "http": {"common", "tokenizer", "jinja", "api"},
    "coordinator": {"common", "checkpoint", "tokenizer", "model_files", "policy", "control",
                    "monitoring", "api", "rpc", "http"},
    "loadgen": {"common", "rpc"},
    "quality": {"common", "tokenizer", "model_files", "worker", "models"},
}
NOT_SOURCE = {"tests", "docs", "cluster", "build", "Testing"}
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# A source path in CMake that leaves the folder: ../x.cc or ${PROJECT_SOURCE_DIR}/y/x.cc.
FOREIGN_SOURCE = re.compile(r'(\.\./|\$\{PROJECT_SOURCE_DIR\}/)[\w/.-]*\.(cc|cu|c|cpp)\b')


def acyclic(layers):
    done, active = set(), set()

    def visit(folder):
        if folder in done:
            return True
        if folder in active:
            return False
        active.add(folder)
        ok = all(visit(d) for d in layers[folder])
        active.discard(folder)
        done.add(folder)
        return ok

    return all(visit(f) for f in layers)


def main():
    root = sys.argv[1]
    errors = []
    if not acyclic(LAYERS):
        errors.append("LAYERS has a cycle")
    folders = sorted(d for d in os.listdir(root)
                     if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
                     and d not in NOT_SOURCE)
    for folder in folders:
        if folder not in LAYERS:
            errors.append(f"{folder}/ is not in the layering table (tests/layering_test.py and "
                          "docs/architecture.md)")
            continue
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if name == "CMakeLists.txt":
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        if FOREIGN_SOURCE.search(line.split("#")[0]):
                            errors.append(f"{rel}:{n}: compiles a source file of another folder")
                    continue
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = m.group(1).split("/")[0]
                    if target != folder and target not in LAYERS[folder]:
                        errors.append(f"{rel}:{n}: {folder}/ includes {m.group(1)}")
    for e in errors:
        print("layering:", e)
    print(f"layering: {len(folders)} folders checked, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
