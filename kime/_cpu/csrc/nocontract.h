/* KIME_NO_CONTRACT: a function whose plain C (and NEON vmulq/vaddq, which GCC's arm_neon.h
 * writes as plain vector arithmetic) rounds every product, as the x86-64 baseline does.
 *
 * GCC contracts a * b + c into one FMA wherever the target has FMA (-ffp-contract=fast): on
 * aarch64 everywhere, since FMA is in its baseline, but not in the x86-64 baseline, so there the
 * portable code rounds every product. Turning contraction off per function elsewhere gives those
 * roundings on other targets too: the x86 bits, and RoPE's reference bits. Clang contracts only
 * within one expression, unless the standard pragma says no. Nothing changes on x86. Included by
 * the files whose plain C must match x86 (attention.c, forward.c), not by every kernel. */
#ifndef KIME_NOCONTRACT_H
#define KIME_NOCONTRACT_H

#if defined(__clang__) && !(defined(__x86_64__) || defined(__i386__))
#pragma STDC FP_CONTRACT OFF
#endif
#if defined(__GNUC__) && !defined(__clang__) && !(defined(__x86_64__) || defined(__i386__))
#define KIME_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define KIME_NO_CONTRACT
#endif

#endif
