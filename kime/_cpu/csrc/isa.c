/* ISA dispatch (kernels.h). The CPU's answer (cpuid on x86, getauxval on aarch64) is cached;
 * KIME_ISA is read on every call (one getenv), so a test can change it between calls and a
 * request above the CPU is capped to it. An unknown name caps nothing. */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define ISA_ARM64 1
#endif

#if defined(__aarch64__)
static const char *const NAMES[] = {"portable", "neon", "dotprod", "i8mm", "bf16"};
#else
static const char *const NAMES[] = {"portable", "avx2", "avx512"};
#endif
#define NLEVELS ((int)(sizeof NAMES / sizeof NAMES[0]))

unsigned kime_isa_arm_features(void)
{
    static volatile int cached = -1; /* racing first calls all store the same value */
    int f = cached;
    if (f >= 0)
        return (unsigned)f;
    f = 0;
#ifdef ISA_ARM64
    /* the bit values of the kernel's uapi <asm/hwcap.h>, spelled out for older headers */
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    if (hw & (1UL << 1))
        f |= KIME_ARM_ASIMD;
    if (hw & (1UL << 20))
        f |= KIME_ARM_DOTPROD;
    if (hw & (1UL << 22))
        f |= KIME_ARM_SVE;
    if (hw2 & (1UL << 1))
        f |= KIME_ARM_SVE2;
    if (hw2 & (1UL << 13))
        f |= KIME_ARM_I8MM;
    if (hw2 & (1UL << 14))
        f |= KIME_ARM_BF16;
#elif defined(__aarch64__)
    f = KIME_ARM_ASIMD; /* AdvSIMD is part of every Armv8-A profile an OS runs on */
#endif
    cached = f;
    return (unsigned)f;
}

static int cpu_best(void)
{
    static volatile int cached = -1;
    int best = cached;
    if (best >= 0)
        return best;
    best = KIME_ISA_PORTABLE;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init(); /* libgcc's checks include the OS's XSAVE support for the registers */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        best = KIME_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            best = KIME_ISA_AVX512;
    }
#elif defined(__aarch64__)
    /* each level needs the features of those below it (a CPU with bf16 but no i8mm, which
     * Armv8.6 rules out, would stop at dotprod) */
    const unsigned f = kime_isa_arm_features();
    if (f & KIME_ARM_ASIMD) {
        best = KIME_ISA_NEON;
        if (f & KIME_ARM_DOTPROD) {
            best = KIME_ISA_DOTPROD;
            if (f & KIME_ARM_I8MM) {
                best = KIME_ISA_I8MM;
                if (f & KIME_ARM_BF16)
                    best = KIME_ISA_BF16;
            }
        }
    }
#endif
    cached = best;
    return best;
}

/* The level KIME_ISA names, or -1 when it is unset or names none of this architecture's. */
static int isa_env(void)
{
    const char *cap = getenv("KIME_ISA");
    for (int isa = 0; cap && isa < NLEVELS; isa++)
        if (strcmp(cap, NAMES[isa]) == 0)
            return isa;
    return -1;
}

int kime_isa_detect(void)
{
    const int best = cpu_best(), cap = isa_env();
    return cap >= 0 && cap < best ? cap : best;
}

int kime_isa_uncapped(int isa) { return isa == cpu_best() && isa_env() < 0; }

const char *kime_isa_name(int isa)
{
    return isa >= 0 && isa < NLEVELS ? NAMES[isa] : "unknown";
}
