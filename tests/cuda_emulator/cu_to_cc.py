#!/usr/bin/env python3
"""Rewrites a CUDA source (src/**/*.cu) as C++ for the CUDA emulator: the two constructs that
are not C++. Line numbers are kept (#line), so compiler messages and the emulator's name the .cu.

  Kernel<T><<<grid, block, smem, stream>>>(args)  ->  ::gk_emu::Launch(grid, block, smem, stream)("Kernel<T>", Kernel<T>, args)
  extern __shared__ __align__(16) T name[];       ->  T* name = static_cast<T*>(::gk_emu::DynamicShared());

usage: cu_to_cc.py IN.cu OUT.cc
"""
import os
import re
import sys

LAUNCH = re.compile(r"\b([A-Za-z_][\w:]*(?:<[^;{}()<>]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:\s]+?)\s+(\w+)\s*\[\s*\]\s*;")


def rewrite(text):
    def launch(m):
        kernel, config = m.group(1), m.group(2)
        rest = text[m.end():]
        empty = rest.lstrip().startswith(")")
        return f'::gk_emu::Launch({config})("{kernel}", {kernel}{"" if empty else ", "}'

    text = LAUNCH.sub(launch, text)
    text = DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = static_cast<{m.group(1)}*>(::gk_emu::DynamicShared());", text)
    if "<<<" in text or "extern __shared__" in text:
        line = text[: text.find("<<<") if "<<<" in text else text.find("extern __shared__")].count("\n") + 1
        sys.exit(f"cu_to_cc.py: a launch or dynamic shared array the rewrite does not know, line {line}")
    return text


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    body = rewrite(text)
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write('#include "cuda_emulator.h"\n#line 1 "%s"\n' % src)
        f.write(body)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
