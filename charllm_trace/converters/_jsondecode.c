/* The Kineto event decoder of charllm-trace, compiled by setup.py into the extension module
 * charllm_trace.converters._jsonframe together with the scanner (_jsonframe.c), and called
 * through ctypes (converters/kineto_native.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_swar.h"

/* ---- event decoder ----
 *
 * jd_decode turns one JSON list of Kineto events (a slice that jf_scan framed, "[" ... "]")
 * straight into column buffers: for each complete event (ph "X") that is not the profiler's own
 * "Trace" span, the codes of its name and category (raw spellings interned in hash tables that
 * live across calls), pid, tid and the args device, stream, correlation, External id and
 * Record function id (int64 + valid flag), ts and dur in nanoseconds (exactly from the decimal
 * text, as kineto_times.py reads it: no float), and where its args object is (its
 * few comm/sync args are decoded by msgspec later, for the rows that need them).
 *
 * It validates the whole slice as JSON and returns -1 ("decode this batch with msgspec") on
 * anything it is not certain to read exactly as the msgspec reader does: any syntax error, an
 * escape in a key, a surrogate escape, invalid UTF-8, a control character in a string, nesting
 * deeper than JD_MAX_DEPTH, an exponent beyond +-300, a duplicate key that is read, an element
 * that is not an object, a phase msgspec's fast path does not list, a non-string name or
 * category, a pid/tid/args id that is not an integer of at most 18 digits or null, a ts/dur that
 * is missing, null, not a number or at least 9e15 µs in magnitude, a negative dur, args that are
 * neither an object nor null. Then nothing is kept (the names and categories interned by this call
 * are forgotten). */
#define JD_MAX_DEPTH 64
#define JD_NINT 7 /* pid, tid, device, stream, correlation, External id, Record function id */

typedef struct {
    uint64_t hash;
    int64_t off, len; /* key bytes in the arena */
} jd_entry;

typedef struct {
    int64_t *slots; /* code + 1, 0 = empty; open addressing, power-of-two size */
    int64_t nslots;
    jd_entry *entries;
    int64_t n, cap;
    uint8_t *arena;
    int64_t arena_len, arena_cap;
} jd_table;

typedef struct {
    jd_table t[2]; /* names, categories */
} jd_state;

/* 8 bytes at a time (every complete event's name and category are hashed: kernel names run to
 * hundreds of bytes, where a byte-at-a-time hash was a fifth of the decoder's time), then
 * MurmurHash3's finalizer so that the low bits the table masks depend on every byte */
static uint64_t jd_hash(const uint8_t *p, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) h = (h ^ jf_load(p + i)) * 0xBF58476D1CE4E5B9ULL, h ^= h >> 31;
    if (i < n) {
        uint64_t x = 0;
        memcpy(&x, p + i, (size_t)(n - i));
        h = (h ^ x) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static int jd_table_init(jd_table *t) {
    memset(t, 0, sizeof(*t));
    t->nslots = 1024;
    t->slots = calloc((size_t)t->nslots, sizeof(int64_t));
    t->cap = 512;
    t->entries = malloc((size_t)t->cap * sizeof(jd_entry));
    t->arena_cap = 1 << 16;
    t->arena = malloc((size_t)t->arena_cap);
    return t->slots && t->entries && t->arena;
}

static void jd_table_free(jd_table *t) {
    free(t->slots);
    free(t->entries);
    free(t->arena);
}

static void jd_place(jd_table *t, int64_t code) {
    int64_t mask = t->nslots - 1, i = (int64_t)(t->entries[code].hash & (uint64_t)mask);
    while (t->slots[i]) i = (i + 1) & mask;
    t->slots[i] = code + 1;
}

static int jd_rehash(jd_table *t, int64_t nslots) {
    int64_t *s = calloc((size_t)nslots, sizeof(int64_t));
    if (!s) return 0;
    free(t->slots);
    t->slots = s;
    t->nslots = nslots;
    for (int64_t c = 0; c < t->n; c++) jd_place(t, c);
    return 1;
}

/* the code of key p[0..n), added when new (*added = 1); -1 when out of memory */
static int64_t jd_intern(jd_table *t, const uint8_t *p, int64_t n, int *added) {
    uint64_t h = jd_hash(p, n);
    int64_t mask = t->nslots - 1, i = (int64_t)(h & (uint64_t)mask);
    *added = 0;
    while (t->slots[i]) {
        jd_entry *e = &t->entries[t->slots[i] - 1];
        if (e->hash == h && e->len == n && memcmp(t->arena + e->off, p, (size_t)n) == 0) return t->slots[i] - 1;
        i = (i + 1) & mask;
    }
    if (t->n == t->cap) {
        jd_entry *ne = realloc(t->entries, (size_t)t->cap * 2 * sizeof(jd_entry));
        if (!ne) return -1;
        t->entries = ne;
        t->cap *= 2;
    }
    if (t->arena_len + n > t->arena_cap) {
        int64_t c = t->arena_cap;
        while (t->arena_len + n > c) c *= 2;
        uint8_t *na = realloc(t->arena, (size_t)c);
        if (!na) return -1;
        t->arena = na;
        t->arena_cap = c;
    }
    memcpy(t->arena + t->arena_len, p, (size_t)n);
    int64_t code = t->n++;
    t->entries[code] = (jd_entry){h, t->arena_len, n};
    t->arena_len += n;
    t->slots[i] = code + 1;
    *added = 1;
    if (t->n * 2 > t->nslots && !jd_rehash(t, t->nslots * 2)) return -1;
    return code;
}

/* forget the entries from code n0 on */
static void jd_truncate(jd_table *t, int64_t n0) {
    if (t->n == n0) return;
    t->n = n0;
    t->arena_len = n0 ? t->entries[n0 - 1].off + t->entries[n0 - 1].len : 0;
    memset(t->slots, 0, (size_t)t->nslots * sizeof(int64_t));
    for (int64_t c = 0; c < n0; c++) jd_place(t, c);
}

void *jd_new(void) {
    jd_state *st = calloc(1, sizeof(jd_state));
    if (!st) return NULL;
    if (!jd_table_init(&st->t[0]) || !jd_table_init(&st->t[1])) {
        jd_table_free(&st->t[0]);
        jd_table_free(&st->t[1]);
        free(st);
        return NULL;
    }
    return st;
}

void jd_free(void *p) {
    jd_state *st = p;
    if (!st) return;
    jd_table_free(&st->t[0]);
    jd_table_free(&st->t[1]);
    free(st);
}

/* ---- the parser: each function returns the position after what it read, or -1 (fall back) */

typedef struct {
    const uint8_t *b;
    int64_t n;
} jd_in;

static int64_t jd_ws(const jd_in *in, int64_t p) {
    while (p < in->n) {
        uint8_t c = in->b[p];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        p++;
    }
    return p;
}

static int jd_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* bytes that end the plain run of a string: quote, backslash, control, non-ASCII */
static uint8_t jd_stop[256];

static void jd_init_tables(void) {
    if (jd_stop['"']) return;
    for (int c = 0; c < 256; c++) jd_stop[c] = (c < 0x20 || c >= 0x80 || c == '"' || c == '\\');
}

/* p at the opening quote; *esc is set when the string has an escape */
static int64_t jd_string(const jd_in *in, int64_t p, int *esc) {
    const uint8_t *b = in->b;
    int64_t n = in->n;
    *esc = 0;
    p++;
    for (;;) {
        for (; p + 8 <= n; p += 8) { /* 8 plain bytes at a time: no quote, backslash, control, non-ASCII */
            uint64_t x = jf_load(b + p);
            if ((x & JF_HIGH) || JF_HAS_LESS(x, 0x20) || jf_quote_or_bs(x)) break;
        }
        while (p < n && !jd_stop[b[p]]) p++;
        if (p >= n) return -1;
        uint8_t c = b[p];
        if (c == '"') return p + 1;
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= n) return -1;
            uint8_t e = b[p + 1];
            if (e == 'u') {
                if (p + 5 >= n || !jd_hex(b[p + 2]) || !jd_hex(b[p + 3]) || !jd_hex(b[p + 4]) || !jd_hex(b[p + 5]))
                    return -1;
                int hi = (b[p + 2] | 0x20), hi2 = (b[p + 3] | 0x20);
                if (hi == 'd' && hi2 >= '8' && hi2 != ':' && (hi2 <= '9' || (hi2 >= 'a' && hi2 <= 'f')))
                    return -1; /* a surrogate: left to msgspec */
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                return -1;
            }
            continue;
        }
        if (c < 0x80) return -1; /* a control character */
        /* UTF-8: well-formed sequences only (no overlongs, surrogates or > U+10FFFF) */
        int len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return -1;
        if (p + len > n) return -1;
        if (b[p + 1] < lo || b[p + 1] > hi) return -1;
        for (int k = 2; k < len; k++)
            if (b[p + k] < 0x80 || b[p + k] > 0xBF) return -1;
        p += len;
    }
}

/* a JSON number at p. *is_int: no fraction or exponent; *ndig: its integer digits */
static int64_t jd_number(const jd_in *in, int64_t p, int *is_int, int *ndig) {
    const uint8_t *b = in->b;
    int64_t n = in->n;
    *is_int = 1;
    if (p < n && b[p] == '-') p++;
    if (p >= n) return -1;
    int64_t d0 = p;
    if (b[p] == '0') {
        p++;
    } else if (b[p] >= '1' && b[p] <= '9') {
        while (p < n && b[p] >= '0' && b[p] <= '9') p++;
    } else {
        return -1;
    }
    *ndig = (int)(p - d0 > 1000 ? 1000 : p - d0);
    if (p < n && b[p] == '.') {
        *is_int = 0;
        p++;
        int64_t f0 = p;
        while (p < n && b[p] >= '0' && b[p] <= '9') p++;
        if (p == f0) return -1;
    }
    if (p < n && (b[p] == 'e' || b[p] == 'E')) {
        *is_int = 0;
        p++;
        if (p < n && (b[p] == '+' || b[p] == '-')) p++;
        int64_t e0 = p;
        int ev = 0;
        while (p < n && b[p] >= '0' && b[p] <= '9') {
            if (ev < 100000) ev = ev * 10 + (b[p] - '0');
            p++;
        }
        if (p == e0 || ev > 300) return -1; /* out of range for msgspec: left to it */
    }
    if (p < n && (b[p] == '-' || b[p] == '+' || b[p] == '.' || (b[p] >= '0' && b[p] <= '9'))) return -1;
    return p;
}

static int64_t jd_value(const jd_in *in, int64_t p, int depth);

static int64_t jd_literal(const jd_in *in, int64_t p, const char *lit) {
    size_t k = strlen(lit);
    if (p + (int64_t)k > in->n || memcmp(in->b + p, lit, k) != 0) return -1;
    return p + (int64_t)k;
}

/* After a member's (or an element's) value, which ended at p (-1: it was not valid): the next
 * member's position; or, at the container's `close`, the position after it with *end set; or -1. */
static inline int64_t jd_after_value(const jd_in *in, int64_t p, uint8_t close, int *end) {
    *end = 0;
    if (p < 0) return -1;
    p = jd_ws(in, p);
    if (p >= in->n) return -1;
    if (in->b[p] == ',') return jd_ws(in, p + 1);
    if (in->b[p] != close) return -1;
    *end = 1;
    return p + 1;
}

/* any JSON value, validated and skipped */
static int64_t jd_value(const jd_in *in, int64_t p, int depth) {
    if (p >= in->n) return -1;
    uint8_t c = in->b[p];
    int esc, is_int, nd;
    switch (c) {
    case '"':
        return jd_string(in, p, &esc);
    case '{':
    case '[':
        if (depth >= JD_MAX_DEPTH) return -1;
        {
            uint8_t close = c == '{' ? '}' : ']';
            p = jd_ws(in, p + 1);
            if (p < in->n && in->b[p] == close) return p + 1;
            for (;;) {
                if (c == '{') {
                    if (p >= in->n || in->b[p] != '"') return -1;
                    p = jd_string(in, p, &esc);
                    if (p < 0) return -1;
                    p = jd_ws(in, p);
                    if (p >= in->n || in->b[p] != ':') return -1;
                    p = jd_ws(in, p + 1);
                }
                int end;
                p = jd_after_value(in, jd_value(in, p, depth + 1), close, &end);
                if (p < 0 || end) return p;
            }
        }
    case 't':
        return jd_literal(in, p, "true");
    case 'f':
        return jd_literal(in, p, "false");
    case 'n':
        return jd_literal(in, p, "null");
    default:
        return jd_number(in, p, &is_int, &nd);
    }
}

/* value of an integer field: *st = 1 an integer (*v), 0 null, 2 anything else (read as the
 * msgspec reader would only with Python) */
static int64_t jd_int_field(const jd_in *in, int64_t p, int64_t *v, int *st) {
    int is_int, nd;
    uint8_t c = in->b[p];
    if (c == '-' || (c >= '0' && c <= '9')) {
        int64_t e = jd_number(in, p, &is_int, &nd);
        if (e < 0) return -1;
        if (!is_int || nd > 18) {
            *st = 2;
            return e;
        }
        int neg = c == '-';
        int64_t x = 0;
        for (int64_t i = p + neg; i < e; i++) x = x * 10 + (in->b[i] - '0');
        *v = neg ? -x : x;
        *st = 1;
        return e;
    }
    if (c == 'n') {
        *st = 0;
        return jd_literal(in, p, "null");
    }
    *st = 2;
    return jd_value(in, p, 1);
}

/* |value| < 9e15 µs (kineto_profile.MAX_US), in ns: the bound on ts and dur */
#define JD_NS_LIMIT 9000000000000000000ULL

/* The JSON number b[p..e) (valid: jd_number read it) of microseconds as integer nanoseconds,
 * exactly from its decimal text (kineto_times.py: the msgspec reader's twin): the
 * decimal value times 1000, rounded to the nearest integer, ties to even. No float is involved, so
 * absolute Unix microseconds with three decimals (1712195495519689.047) keep every nanosecond.
 * Returns 0 when |value| >= 9e15 µs (the reader's bound); *negative: the value is below zero
 * (-0 is not). */
static int jd_us_to_ns(const uint8_t *b, int64_t p, int64_t e, int64_t *ns, int *negative) {
    int neg = 0;
    if (b[p] == '-') {
        neg = 1;
        p++;
    }
    int64_t i0 = p, i1 = p;
    while (i1 < e && b[i1] >= '0' && b[i1] <= '9') i1++;
    int64_t f0 = i1, f1 = i1;
    if (f0 < e && b[f0] == '.') {
        f0++;
        f1 = f0;
        while (f1 < e && b[f1] >= '0' && b[f1] <= '9') f1++;
    }
    int64_t x = 0; /* the exponent: jd_number bounds it to +-300 */
    if (f1 < e) {
        int64_t q = f1 + 1, xneg = 0;
        if (b[q] == '-' || b[q] == '+') xneg = b[q++] == '-';
        for (; q < e; q++)
            if (x < 100000) x = x * 10 + (b[q] - '0');
        if (xneg) x = -x;
    }
    int64_t nint = i1 - i0, nd = nint + (f1 - f0);
    if (f1 == e && f1 - f0 <= 3 && nint <= 16) {
        /* the common case, Kineto's: no exponent, at most three decimals, at most 16 integer
         * digits (more are beyond the bound): exact in uint64 without a check per digit */
        static const uint64_t scale[4] = {1000, 100, 10, 1};
        uint64_t q = 0;
        for (int64_t k = i0; k < i1; k++) q = q * 10 + (uint64_t)(b[k] - '0');
        for (int64_t k = f0; k < f1; k++) q = q * 10 + (uint64_t)(b[k] - '0');
        q *= scale[f1 - f0];
        if (q >= JD_NS_LIMIT) return 0;
        *ns = neg ? -(int64_t)q : (int64_t)q;
        *negative = neg && q;
        return 1;
    }
    int64_t s = x - (f1 - f0) + 3;   /* value in ns = digits * 10^s */
    int64_t keep = s < 0 ? nd + s : nd; /* digits at or above the nanosecond */
    uint64_t q = 0;
    int r = 0, sticky = 0, nonzero = 0;
    for (int64_t k = 0; k < nd; k++) {
        int d = (k < nint ? b[i0 + k] : b[f0 + k - nint]) - '0';
        nonzero |= d;
        if (k < keep) {
            if (q >= JD_NS_LIMIT / 10) return 0; /* q * 10 + d >= the bound (9e18 = 10 x 9e17) */
            q = q * 10 + (uint64_t)d;
        } else if (k == keep) {
            r = d;
        } else {
            sticky |= d;
        }
    }
    for (int64_t k = 0; q && k < s; k++) {
        if (q >= JD_NS_LIMIT / 10) return 0;
        q *= 10;
    }
    if (r > 5 || (r == 5 && (sticky || (q & 1)))) q++; /* at most 9e18: int64 holds it */
    *ns = neg ? -(int64_t)q : (int64_t)q;
    *negative = neg && nonzero;
    return 1;
}

/* value of ts/dur in ns: *st = 1 a number, 0 null, 2 anything else (or beyond the bound);
 * *negative: a number below zero */
static int64_t jd_time_field(const jd_in *in, int64_t p, int64_t *ns, int *st, int *negative) {
    int is_int, nd;
    uint8_t c = in->b[p];
    if (c == '-' || (c >= '0' && c <= '9')) {
        int64_t e = jd_number(in, p, &is_int, &nd);
        if (e < 0) return -1;
        *st = jd_us_to_ns(in->b, p, e, ns, negative) ? 1 : 2;
        return e;
    }
    if (c == 'n') {
        *st = 0;
        *ns = 0;
        return jd_literal(in, p, "null");
    }
    *st = 2;
    return jd_value(in, p, 1);
}

static int jd_key(const uint8_t *k, int64_t n, const char *s) {
    return (int64_t)strlen(s) == n && memcmp(k, s, (size_t)n) == 0;
}

/* the phases msgspec's fast path lists (kineto._PHASES) */
static int jd_listed_phase(uint8_t c) {
    return c && strchr("BEiICbnestfPONDMRTpSFX", c) != NULL;
}

enum { F_PH, F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS, F_DEVICE, F_STREAM, F_CORR, F_EXT, F_RF };

typedef struct {
    int64_t ph_s, ph_e, cat_s, cat_e, name_s, name_e, args_s, args_e;
    int cat_t, name_t, args_t; /* 0 missing, 1 null, 2 string / object, 3 anything else */
    int64_t iv[JD_NINT];
    int ist[JD_NINT]; /* 0 null or missing, 1 integer, 2 anything else */
    int64_t ts, dur;
    int tst, dst, dneg;
    uint32_t seen;
} jd_event;

/* An object member's key at p (a string without escapes: *k, *kn) and its colon: the position of its
 * value, or -1. */
static inline int64_t jd_key_at(const jd_in *in, int64_t p, const uint8_t **k, int64_t *kn) {
    int esc;
    if (p < 0 || p >= in->n || in->b[p] != '"') return -1;
    int64_t ks = p + 1;
    p = jd_string(in, p, &esc);
    if (p < 0 || esc) return -1;
    *k = in->b + ks;
    *kn = p - 1 - ks;
    p = jd_ws(in, p);
    if (p >= in->n || in->b[p] != ':') return -1;
    p = jd_ws(in, p + 1);
    return p >= in->n ? -1 : p;
}

/* At an object's '{': the position of its first member (*end 0), or the position after an empty
 * object's '}' (*end 1). */
static inline int64_t jd_object_start(const jd_in *in, int64_t p, int *end) {
    p = jd_ws(in, p + 1);
    *end = p < in->n && in->b[p] == '}';
    return *end ? p + 1 : p;
}

typedef int (*jd_lookup)(const uint8_t *k, int64_t kn);

/* An event's (or its args') member at p: its key looked up with `lookup` (*f: the field, -1 for one
 * not decoded; a field seen before in the event is refused), then its colon: the position of its
 * value, or -1. */
static inline int64_t jd_member(const jd_in *in, int64_t p, jd_lookup lookup, jd_event *ev, int *f) {
    const uint8_t *k;
    int64_t kn;
    p = jd_key_at(in, p, &k, &kn);
    if (p < 0) return -1;
    *f = lookup(k, kn);
    if (*f >= 0) {
        if (ev->seen & (1u << *f)) return -1;
        ev->seen |= 1u << *f;
    }
    return p;
}

static int jd_args_key(const uint8_t *k, int64_t kn) {
    if (jd_key(k, kn, "device")) return F_DEVICE;
    if (jd_key(k, kn, "stream")) return F_STREAM;
    if (jd_key(k, kn, "correlation")) return F_CORR;
    if (jd_key(k, kn, "External id")) return F_EXT;
    if (jd_key(k, kn, "Record function id")) return F_RF;
    return -1;
}

static int64_t jd_args(const jd_in *in, int64_t p, jd_event *ev) {
    int end, f;
    for (p = jd_object_start(in, p, &end); !end; p = jd_after_value(in, p, '}', &end)) {
        p = jd_member(in, p, jd_args_key, ev, &f);
        if (p < 0) return -1;
        if (f >= 0) {
            int j = f - F_DEVICE + 2;
            p = jd_int_field(in, p, &ev->iv[j], &ev->ist[j]);
        } else {
            p = jd_value(in, p, 2);
        }
    }
    return p;
}

/* a string-or-null field: type 1 null, 2 string, 3 anything else */
static int64_t jd_text_field(const jd_in *in, int64_t p, int64_t *s, int64_t *e, int *t) {
    int esc;
    *s = p;
    if (in->b[p] == '"') {
        *t = 2;
        p = jd_string(in, p, &esc);
    } else if (in->b[p] == 'n') {
        *t = 1;
        p = jd_literal(in, p, "null");
    } else {
        *t = 3;
        p = jd_value(in, p, 1);
    }
    *e = p;
    return p;
}

static int jd_event_key(const uint8_t *k, int64_t kn) {
    switch (kn) { /* by length first */
    case 2:
        return jd_key(k, kn, "ph") ? F_PH : jd_key(k, kn, "ts") ? F_TS : -1;
    case 3:
        return jd_key(k, kn, "cat")   ? F_CAT
               : jd_key(k, kn, "pid") ? F_PID
               : jd_key(k, kn, "tid") ? F_TID
               : jd_key(k, kn, "dur") ? F_DUR
                                      : -1;
    case 4:
        return jd_key(k, kn, "name") ? F_NAME : jd_key(k, kn, "args") ? F_ARGS : -1;
    default:
        return -1;
    }
}

static int64_t jd_event_at(const jd_in *in, int64_t p, jd_event *ev) {
    int esc, negative, end, f;
    memset(ev, 0, sizeof(*ev));
    for (p = jd_object_start(in, p, &end); !end; p = jd_after_value(in, p, '}', &end)) {
        p = jd_member(in, p, jd_event_key, ev, &f);
        if (p < 0) return -1;
        switch (f) {
        case F_PH:
            ev->ph_s = p;
            if (in->b[p] != '"') return -1; /* not a string: msgspec's general path */
            p = jd_string(in, p, &esc);
            if (p < 0 || esc) return -1;
            ev->ph_e = p;
            break;
        case F_CAT:
            p = jd_text_field(in, p, &ev->cat_s, &ev->cat_e, &ev->cat_t);
            break;
        case F_NAME:
            p = jd_text_field(in, p, &ev->name_s, &ev->name_e, &ev->name_t);
            break;
        case F_PID:
            p = jd_int_field(in, p, &ev->iv[0], &ev->ist[0]);
            break;
        case F_TID:
            p = jd_int_field(in, p, &ev->iv[1], &ev->ist[1]);
            break;
        case F_TS:
            p = jd_time_field(in, p, &ev->ts, &ev->tst, &negative);
            break;
        case F_DUR:
            p = jd_time_field(in, p, &ev->dur, &ev->dst, &ev->dneg);
            break;
        case F_ARGS:
            ev->args_s = p;
            if (in->b[p] == '{') {
                ev->args_t = 2;
                p = jd_args(in, p, ev);
            } else if (in->b[p] == 'n') {
                ev->args_t = 1;
                p = jd_literal(in, p, "null");
            } else {
                ev->args_t = 3;
                p = jd_value(in, p, 1);
            }
            ev->args_e = p;
            break;
        default:
            p = jd_value(in, p, 1);
        }
    }
    return p;
}

/* code of a name/category (the raw JSON text, quotes included; "null" when missing); new ones
 * are reported in new_off/new_len/new_which. -1: out of memory or out of room */
static int64_t jd_code(jd_state *st, int which, const jd_in *in, const jd_event *ev, int64_t *new_off,
                       int64_t *new_len, uint8_t *new_which, int64_t new_cap, int64_t *n_new) {
    int64_t s = which ? ev->cat_s : ev->name_s, e = which ? ev->cat_e : ev->name_e;
    int t = which ? ev->cat_t : ev->name_t;
    static const uint8_t null_text[] = "null";
    const uint8_t *k = t == 0 ? null_text : in->b + s;
    int64_t kn = t == 0 ? 4 : e - s;
    int added;
    int64_t code = jd_intern(&st->t[which], k, kn, &added);
    if (code < 0) return -1;
    if (added) {
        if (*n_new >= new_cap) return -1;
        new_off[*n_new] = t == 0 ? -1 : s;
        new_len[*n_new] = kn;
        new_which[*n_new] = (uint8_t)which;
        (*n_new)++;
    }
    return code;
}

/* The length of jd_decode's info array (a build from older sources lacks this function, so the
 * loader refuses it as out of date rather than read a shorter array). */
int64_t jd_info_len(void) { return 3; }

/* Decode the list b[0..n). Returns the number of rows written (at most cap), or -1 (fall back).
 * info: [0] elements in the list, [1] new names and categories reported, [2] metadata events
 * (ph "M": process names and labels, decoded by the caller), whose places are in meta_off and
 * meta_len (at most cap). */
int64_t jd_decode(void *state, const uint8_t *b, int64_t n, int64_t cap, uint32_t *name, uint32_t *cat,
                  int64_t *ints, uint8_t *valid, int64_t *ts, int64_t *dur, int64_t *args_off,
                  int64_t *args_len, int64_t *new_off, int64_t *new_len, uint8_t *new_which, int64_t new_cap,
                  int64_t *meta_off, int64_t *meta_len, int64_t *info) {
    jd_state *st = state;
    jd_in in = {b, n};
    jd_event ev;
    int64_t rows = 0, elems = 0, n_new = 0, n_meta = 0;
    int64_t n0[2] = {st->t[0].n, st->t[1].n};
    jd_init_tables();
    int64_t p = jd_ws(&in, 0);
    if (p >= n || b[p] != '[') goto fail;
    p = jd_ws(&in, p + 1);
    if (p < n && b[p] == ']') {
        p++;
        goto end;
    }
    for (;;) {
        if (p >= n || b[p] != '{') goto fail;
        int64_t ev_start = p;
        p = jd_event_at(&in, p, &ev);
        if (p < 0) goto fail;
        elems++;
        if (!(ev.seen & (1u << F_PH)) || ev.ph_e - ev.ph_s != 3 || !jd_listed_phase(b[ev.ph_s + 1])) goto fail;
        if (b[ev.ph_s + 1] == 'X') {
            if (ev.args_t == 3 || ev.cat_t == 3 || ev.name_t == 3) goto fail;
            if (!(ev.cat_t == 2 && ev.cat_e - ev.cat_s == 7 &&
                  (memcmp(b + ev.cat_s, "\"Trace\"", 7) == 0 || memcmp(b + ev.cat_s, "\"trace\"", 7) == 0))) {
                if (rows >= cap) goto fail;
                for (int j = 0; j < JD_NINT; j++) {
                    if (ev.ist[j] == 2) goto fail;
                    ints[(int64_t)j * cap + rows] = ev.ist[j] ? ev.iv[j] : 0;
                    valid[(int64_t)j * cap + rows] = (uint8_t)ev.ist[j];
                }
                /* a missing/null/odd ts or dur, or a negative dur: msgspec's reader names it */
                if (ev.tst != 1 || ev.dst != 1 || ev.dneg) goto fail;
                ts[rows] = ev.ts;
                dur[rows] = ev.dur;
                args_off[rows] = ev.args_t == 2 ? ev.args_s : -1;
                args_len[rows] = ev.args_t == 2 ? ev.args_e - ev.args_s : 0;
                int64_t c = jd_code(st, 0, &in, &ev, new_off, new_len, new_which, new_cap, &n_new);
                if (c < 0) goto fail;
                name[rows] = (uint32_t)c;
                c = jd_code(st, 1, &in, &ev, new_off, new_len, new_which, new_cap, &n_new);
                if (c < 0) goto fail;
                cat[rows] = (uint32_t)c;
                rows++;
            }
        } else if (b[ev.ph_s + 1] == 'M') {
            if (n_meta >= cap) goto fail;
            meta_off[n_meta] = ev_start;
            meta_len[n_meta] = p - ev_start;
            n_meta++;
        }
        p = jd_ws(&in, p);
        if (p >= n) goto fail;
        if (b[p] == ',') {
            p = jd_ws(&in, p + 1);
            continue;
        }
        if (b[p] == ']') {
            p++;
            break;
        }
        goto fail;
    }
end:
    if (jd_ws(&in, p) != n) goto fail;
    info[0] = elems;
    info[1] = n_new;
    info[2] = n_meta;
    return rows;
fail:
    jd_truncate(&st->t[0], n0[0]);
    jd_truncate(&st->t[1], n0[1]);
    return -1;
}
