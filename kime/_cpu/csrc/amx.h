/* Intel AMX for the INT8 and BF16 GEMMs (qgemm.c, bgemm.c): whether this process may use the
 * tiles, and each thread's tile configuration.
 *
 * Every kernel here uses one configuration: 8 tiles of 16 rows x 64 bytes (tiles 0-3 a 2 x 2
 * block of FP32 or INT32 accumulators, 4-5 two A tiles, 6-7 two B tiles). A thread loads it
 * before its tiles (kime_amx_enter) and releases the tile state after them (kime_amx_leave), so
 * an idle pool thread's context switches save no tile data.
 */
#ifndef KIME_AMX_H
#define KIME_AMX_H

#if defined(__GNUC__) && defined(__x86_64__) && \
    (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define KIME_AMX 1

#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define TAMX __attribute__((target("amx-tile,amx-int8,amx-bf16")))

enum { KIME_AMX_INT8 = 1, KIME_AMX_BF16 = 2 };

/* The AMX parts (KIME_AMX_* bits) this process may use: AMX-TILE with AMX-INT8 (cpuid 7.0 EDX
 * bits 24, 25) and AMX-BF16 (bit 22), the OS managing the tile state (XCR0 bits 17, 18), and, on
 * Linux, the permission to use it (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; the
 * kernel grants it once per process, and refuses where a thread's signal stack is too small for
 * the tiles: then the AVX-512 kernels run). Callers cache the answer. */
static inline unsigned kime_amx_features(void)
{
    unsigned eax, ebx, ecx, edx, lo, hi, f = 0;
    if (!__get_cpuid_count(1, 0, &eax, &ebx, &ecx, &edx) || !(ecx >> 27 & 1)) /* OSXSAVE */
        return 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx >> 24 & 1))
        return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo >> 17 & 3) != 3)
        return 0;
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
        return 0;
#else
    return 0;
#endif
    if (edx >> 25 & 1)
        f |= KIME_AMX_INT8;
    if (edx >> 22 & 1)
        f |= KIME_AMX_BF16;
    return f;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kime_amx_config;

/* A static object, not a local: GCC 12 drops a local's stores before ldtilecfg reads it (it does
 * not see the read). */
static const kime_amx_config KIME_AMX_CONFIG = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

TAMX static inline void kime_amx_enter(void) { _tile_loadconfig(&KIME_AMX_CONFIG); }

TAMX static inline void kime_amx_leave(void) { _tile_release(); }

#endif
#endif
