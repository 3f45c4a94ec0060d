/* ISA dispatch (kernels.h). The cpuid answer is cached; KIME_ISA is read on every call (one
 * getenv), so a test can change it between calls and a request above the CPU is capped to it. */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static const char *const NAMES[] = {"portable", "avx2", "avx512"};

static int cpu_best(void)
{
    static volatile int cached = -1; /* racing first calls all store the same value */
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
#endif
    cached = best;
    return best;
}

int kime_isa_detect(void)
{
    int best = cpu_best();
    const char *cap = getenv("KIME_ISA");
    for (int isa = 0; cap && isa < best; isa++)
        if (strcmp(cap, NAMES[isa]) == 0)
            best = isa;
    return best;
}

const char *kime_isa_name(int isa)
{
    return isa >= 0 && isa <= KIME_ISA_AVX512 ? NAMES[isa] : "unknown";
}
