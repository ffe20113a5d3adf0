/* Word-at-a-time (SWAR) tests on 8 bytes, shared by the JSON scanner (_jsonframe.c) and the
 * event decoder (_jsondecode.c), which setup.py compiles into one extension module. */
#ifndef CHARLLM_SWAR_H
#define CHARLLM_SWAR_H
#include <stdint.h>
#include <string.h>

/* word-at-a-time tests on 8 bytes (SWAR): a byte equal to 0, or below n (n <= 128) */
#define JF_ONES 0x0101010101010101ULL
#define JF_HIGH 0x8080808080808080ULL
#define JF_HAS_ZERO(x) (((x) - JF_ONES) & ~(x) & JF_HIGH)
#define JF_HAS_LESS(x, n) (((x) - JF_ONES * (n)) & ~(x) & JF_HIGH)

static inline uint64_t jf_load(const uint8_t *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* whether any of the 8 bytes is a quote or a backslash */
static inline int jf_quote_or_bs(uint64_t x) {
    return JF_HAS_ZERO(x ^ (JF_ONES * '"')) || JF_HAS_ZERO(x ^ (JF_ONES * '\\'));
}

#endif
