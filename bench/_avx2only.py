"""Benchmark children that see a CPU without AVX-512 on an AVX-512 machine.

Linux can make the ``CPUID`` instruction fault in one process (``arch_prctl(ARCH_SET_CPUID, 0)``,
on CPUs with the ``cpuid_fault`` flag). A small preloaded library answers the faults with the
real ``CPUID`` minus the AVX-512 bits (AVX-512 F/DQ/IFMA/CD/BW/VL/VBMI/VBMI2/VNNI/BITALG/
VPOPCNTDQ/BF16/FP16, AVX-VNNI, and the ZMM state), so every library that dispatches on
``CPUID`` (OpenBLAS, NumPy, LLVM and numba, onnxruntime, torch, faiss's loader) takes its AVX2
path, on the same hardware. The cores still run those AVX2 paths at their own speed: numbers
measured this way are AVX2 code on this CPU, not an AVX2-only CPU's.

``hide_avx512_env()`` compiles the library (needs a C compiler), checks in a child that
AVX-512 is hidden, and returns the environment to add to the children.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from _harness import AVX512_HIDDEN, WORK_DIR

C_SOURCE = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <asm/prctl.h>

static long set_cpuid(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }

static void on_fault(int sig, siginfo_t *si, void *arg) {
    ucontext_t *ctx = (ucontext_t *)arg;
    greg_t *g = ctx->uc_mcontext.gregs;
    unsigned char *ip = (unsigned char *)g[REG_RIP];
    (void)sig; (void)si;
    if (!(ip[0] == 0x0f && ip[1] == 0xa2)) {  /* a real fault: die as without us */
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX], a, b, c, d;
    set_cpuid(1);
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(sub));
    set_cpuid(0);
    if (leaf == 7 && sub == 0) {
        b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28)
               | (1u << 30) | (1u << 31));
        c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23));
    } else if (leaf == 7 && sub == 1) {
        a &= ~((1u << 4) | (1u << 5));
    } else if (leaf == 0xd && sub == 0) {
        a &= ~0xe0u;
    }
    g[REG_RAX] = a; g[REG_RBX] = b; g[REG_RCX] = c; g[REG_RDX] = d;
    g[REG_RIP] += 2;
}

__attribute__((constructor)) static void hide_avx512(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, 0);
    set_cpuid(0);
}
"""

_CHECK = (
    "import llvmlite.binding as l, numpy as np; "
    "f = l.get_host_cpu_features(); "
    "print(int(bool(f.get('avx2'))), int(bool(f.get('avx512f'))))"
)


def hide_avx512_env() -> dict[str, str]:
    """``LD_PRELOAD`` (and ``AVX512_HIDDEN``) for children that see no AVX-512; exits with a
    message where this machine cannot do it."""
    info = Path("/proc/cpuinfo")
    flags = set(info.read_text().split()) if info.exists() else set()
    if "cpuid_fault" not in flags:
        raise SystemExit("--hide-avx512 needs CPUID faulting (flag cpuid_fault in /proc/cpuinfo)")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise SystemExit("--hide-avx512 needs a C compiler (cc or gcc; set CC)")
    lib = WORK_DIR / f"avx2only-{hashlib.sha256(C_SOURCE.encode()).hexdigest()[:12]}.so"
    if not lib.exists():
        WORK_DIR.mkdir(parents=True, exist_ok=True)
        src = lib.with_suffix(".c")
        src.write_text(C_SOURCE)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(src)], check=True)
        os.replace(tmp, lib)
    env = {"LD_PRELOAD": str(lib), AVX512_HIDDEN: "1"}
    seen = subprocess.run(
        [sys.executable, "-c", _CHECK], env={**os.environ, **env}, capture_output=True, text=True
    )
    if seen.returncode or seen.stdout.split() != ["1", "0"]:
        err = seen.stderr[-500:]
        raise SystemExit(f"--hide-avx512: a child still sees AVX-512 or failed: {err}")
    return env
