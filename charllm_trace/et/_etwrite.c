/* The Chakra ET node encoder: one length-prefixed protobuf Node message per row, from columns.
 *
 * Built into the extension module charllm_trace.et._etscan with _etscan.c (setup.py) and called
 * through ctypes by et/writer.py (et/_native.py declares the function). The writer's protobuf
 * path (upb, CHARLLM_TRACE_NATIVE=0) is its test oracle: tests/et/test_et_encode.py checks that
 * both give the same bytes. It writes what upb's SerializeToString writes for the messages
 * et/writer.py builds: fields in field-number order, proto3 scalars only when not zero, oneof
 * members always, packed repeated integers. Everything it writes comes from the columns or from
 * byte pieces Python encoded with protobuf (attribute names, null markers, and the rare or
 * free-form attributes: the all-to-all splits and the `attrs` JSON); it knows no names itself.
 */
#include <stdint.h>
#include <string.h>

/* integer columns (nulls as 0 beside a null flag) */
enum { I_ID, I_START, I_DUR, I_TID, I_STREAM, I_RF_ID, I_COMM_BYTES, I_PEER, I_INT_ATTRS };
/* small per-row codes (-1: null / none) */
enum { S_TYPE, S_ON_GPU, S_COMM_TYPE, S_IN, S_OUT, S_PEER_MODE, N_SMALL };
/* string columns (Arrow offsets + data + null flags) */
enum { C_NAME, C_IO, C_PG_NAME = 7, C_COLL_STR, C_SPLITS, C_STR_ATTRS };
/* byte pieces: attribute names (AttributeProto field 1), then null markers (StringList field 1) */
enum {
    P_IS_CPU, P_TID, P_STREAM, P_RF_ID, P_COMM_TYPE, P_COLL_TYPE, P_COMM_SIZE, P_PG_NAME, P_COMM_SRC,
    P_COMM_DST, P_PEER, P_NULLS, P_PRESENT, P_NULL_NAME, P_NULL_TYPE, P_NULL_IO, P_INT_ATTRS = P_NULL_IO + 6
};

typedef struct {
    int64_t n;                     /* rows */
    const int64_t *ints;           /* (I_INT_ATTRS + n_int_attrs) x n, column-major */
    const uint8_t *int_null;       /* the same shape: 1 = null */
    int64_t n_int_attrs;
    const int8_t *small;           /* N_SMALL x n */
    const int64_t *const *str_off; /* per string column: n + 1 offsets into its data */
    const uint8_t *const *str_data;
    const uint8_t *const *str_null;
    int64_t n_str_attrs;
    const int64_t *ctrl_off, *ctrl; /* control dependencies: n + 1 offsets, values */
    const int64_t *data_off, *data; /* data dependencies */
    const int64_t *extra_code;      /* per row: the row's `attrs` piece in extra_off/data, -1: none */
    const int64_t *extra_off;
    const uint8_t *extra_data;
    const int64_t *piece_off; /* the byte pieces (enum above, then the attribute names) */
    const uint8_t *piece_data;
    int64_t rank, has_rank;
} et_rows;
#define ET_ROWS_WORDS 20

/* protobuf tags (field << 3 | wire type) */
#define T_ATTR 0x52          /* Node.attr = 10, length-delimited */
#define T_INT32 0x38         /* AttributeProto.int32_val = 7 */
#define T_INT64 0x48         /* AttributeProto.int64_val = 9 */
#define T_BOOL 27 * 8        /* AttributeProto.bool_val = 27 (two-byte tag) */
#define T_STRING 29 * 8 + 2  /* AttributeProto.string_val = 29 */
#define T_STRLIST 30 * 8 + 2 /* AttributeProto.string_list = 30 */

static inline int vsize(uint64_t v) {
    int k = 1;
    while (v >= 0x80) {
        v >>= 7;
        k++;
    }
    return k;
}

static inline uint8_t *put(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint8_t *bytes(uint8_t *p, const uint8_t *src, int64_t len) {
    memcpy(p, src, (size_t)len);
    return p + len;
}

#define PIECE(r, k) ((r)->piece_data + (r)->piece_off[k])
#define PIECE_LEN(r, k) ((r)->piece_off[(k) + 1] - (r)->piece_off[k])
#define INT(r, c, i) ((r)->ints[(int64_t)(c) * (r)->n + (i)])
#define INT_NULL(r, c, i) ((r)->int_null[(int64_t)(c) * (r)->n + (i)])
#define SMALL(r, c, i) ((r)->small[(int64_t)(c) * (r)->n + (i)])
#define STR_NULL(r, c, i) ((r)->str_null[c][i])
#define STR(r, c, i) ((r)->str_data[c] + (r)->str_off[c][i])
#define STR_LEN(r, c, i) ((r)->str_off[c][(i) + 1] - (r)->str_off[c][i])

/* an attribute with a varint value: name piece k, then tag (one or two bytes) and value */
static uint8_t *attr_varint(uint8_t *p, const et_rows *r, int k, unsigned tag, uint64_t v) {
    int64_t inner = PIECE_LEN(r, k) + vsize(tag) + vsize(v);
    *p++ = T_ATTR;
    p = put(p, (uint64_t)inner);
    p = bytes(p, PIECE(r, k), PIECE_LEN(r, k));
    p = put(p, tag);
    return put(p, v);
}

/* an attribute with a string value (string_val, written even when empty: a oneof member) */
static uint8_t *attr_string(uint8_t *p, const et_rows *r, int k, const uint8_t *s, int64_t len) {
    int64_t inner = PIECE_LEN(r, k) + 2 + vsize((uint64_t)len) + len;
    *p++ = T_ATTR;
    p = put(p, (uint64_t)inner);
    p = bytes(p, PIECE(r, k), PIECE_LEN(r, k));
    p = put(p, T_STRING);
    p = put(p, (uint64_t)len);
    return bytes(p, s, len);
}

/* packed repeated uint64 (the dependencies): nothing when empty */
static uint8_t *packed(uint8_t *p, uint8_t tag, const int64_t *v, int64_t lo, int64_t hi) {
    if (hi <= lo) return p;
    int64_t len = 0;
    for (int64_t j = lo; j < hi; j++) len += vsize((uint64_t)v[j]);
    *p++ = tag;
    p = put(p, (uint64_t)len);
    for (int64_t j = lo; j < hi; j++) p = put(p, (uint64_t)v[j]);
    return p;
}

/* an IOInfo message (values, shapes, types: strings, each only when not empty) */
static uint8_t *io_info(uint8_t *p, const et_rows *r, uint8_t tag, int c0, int64_t i) {
    int64_t len = 0;
    for (int c = c0; c < c0 + 3; c++) {
        int64_t l = STR_NULL(r, c, i) ? 0 : STR_LEN(r, c, i);
        if (l) len += 1 + vsize((uint64_t)l) + l;
    }
    *p++ = tag;
    p = put(p, (uint64_t)len);
    for (int c = c0; c < c0 + 3; c++) {
        int64_t l = STR_NULL(r, c, i) ? 0 : STR_LEN(r, c, i);
        if (!l) continue;
        *p++ = (uint8_t)(((c - c0 + 1) << 3) | 2);
        p = put(p, (uint64_t)l);
        p = bytes(p, STR(r, c, i), l);
    }
    return p;
}

/* the most bytes row i can take (a generous bound: every piece, string and value at its largest) */
static int64_t bound(const et_rows *r, int64_t i) {
    int n_str = C_STR_ATTRS + (int)r->n_str_attrs;
    int64_t b = 512 + 4 * r->piece_off[P_INT_ATTRS + r->n_int_attrs + r->n_str_attrs];
    b += 24 * (I_INT_ATTRS + r->n_int_attrs + n_str);
    for (int c = 0; c < n_str; c++) b += STR_LEN(r, c, i);
    b += 11 * (r->ctrl_off[i + 1] - r->ctrl_off[i] + r->data_off[i + 1] - r->data_off[i]);
    if (r->extra_code[i] >= 0) b += r->extra_off[r->extra_code[i] + 1] - r->extra_off[r->extra_code[i]];
    return b;
}

/* the null markers of row i (piece indices), as the writer lists them */
static int nulls(const et_rows *r, int64_t i, int *out) {
    int k = 0;
    if (STR_NULL(r, C_NAME, i)) out[k++] = P_NULL_NAME;
    if (SMALL(r, S_TYPE, i) < 0) out[k++] = P_NULL_TYPE;
    for (int f = 0; f < 2; f++) {
        if (!SMALL(r, f ? S_OUT : S_IN, i)) continue;
        for (int s = 0; s < 3; s++)
            if (STR_NULL(r, C_IO + 3 * f + s, i)) out[k++] = P_NULL_IO + 3 * f + s;
    }
    return k;
}

static uint8_t *fields(uint8_t *p, const et_rows *r, int64_t i) {
    if (INT(r, I_ID, i)) {
        *p++ = 0x08;
        p = put(p, (uint64_t)INT(r, I_ID, i));
    }
    if (!STR_NULL(r, C_NAME, i) && STR_LEN(r, C_NAME, i)) {
        *p++ = 0x12;
        p = put(p, (uint64_t)STR_LEN(r, C_NAME, i));
        p = bytes(p, STR(r, C_NAME, i), STR_LEN(r, C_NAME, i));
    }
    if (SMALL(r, S_TYPE, i) > 0) {
        *p++ = 0x18;
        p = put(p, (uint64_t)SMALL(r, S_TYPE, i));
    }
    p = packed(p, 0x22, r->ctrl, r->ctrl_off[i], r->ctrl_off[i + 1]);
    p = packed(p, 0x2a, r->data, r->data_off[i], r->data_off[i + 1]);
    int64_t start = INT(r, I_START, i), dur = INT(r, I_DUR, i);
    if (!INT_NULL(r, I_START, i) && start > 0 && start / 1000) {
        *p++ = 0x30;
        p = put(p, (uint64_t)(start / 1000));
    }
    if (!INT_NULL(r, I_DUR, i) && dur > 0 && ((uint64_t)dur + 500) / 1000) {
        *p++ = 0x38;
        p = put(p, ((uint64_t)dur + 500) / 1000);
    }
    if (SMALL(r, S_IN, i)) p = io_info(p, r, 0x42, C_IO, i);
    if (SMALL(r, S_OUT, i)) p = io_info(p, r, 0x4a, C_IO + 3, i);
    return p;
}

static uint8_t *peer_attrs(uint8_t *p, const et_rows *r, int64_t i) {
    int has_peer = !INT_NULL(r, I_PEER, i);
    uint64_t peer = (uint64_t)INT(r, I_PEER, i), rank = (uint64_t)r->rank;
    switch (SMALL(r, S_PEER_MODE, i)) {
    case 1: /* send: this rank to the peer */
        if (r->has_rank) p = attr_varint(p, r, P_COMM_SRC, T_INT32, rank);
        if (has_peer) p = attr_varint(p, r, P_COMM_DST, T_INT32, peer);
        break;
    case 2: /* receive: the peer to this rank */
        if (has_peer) p = attr_varint(p, r, P_COMM_SRC, T_INT32, peer);
        if (r->has_rank) p = attr_varint(p, r, P_COMM_DST, T_INT32, rank);
        break;
    default:
        if (has_peer) p = attr_varint(p, r, P_PEER, T_INT64, peer);
    }
    return p;
}

static uint8_t *attrs(uint8_t *p, const et_rows *r, int64_t i) {
    if (SMALL(r, S_ON_GPU, i) >= 0) p = attr_varint(p, r, P_IS_CPU, T_BOOL, SMALL(r, S_ON_GPU, i) == 0);
    static const int cols[3][2] = {{I_TID, P_TID}, {I_STREAM, P_STREAM}, {I_RF_ID, P_RF_ID}};
    for (int k = 0; k < 3; k++)
        if (!INT_NULL(r, cols[k][0], i)) p = attr_varint(p, r, cols[k][1], T_INT64, (uint64_t)INT(r, cols[k][0], i));
    if (SMALL(r, S_COMM_TYPE, i) >= 0)
        p = attr_varint(p, r, P_COMM_TYPE, T_INT64, (uint64_t)SMALL(r, S_COMM_TYPE, i));
    else if (!STR_NULL(r, C_COLL_STR, i))
        p = attr_string(p, r, P_COLL_TYPE, STR(r, C_COLL_STR, i), STR_LEN(r, C_COLL_STR, i));
    if (!INT_NULL(r, I_COMM_BYTES, i))
        p = attr_varint(p, r, P_COMM_SIZE, T_INT64, (uint64_t)INT(r, I_COMM_BYTES, i));
    if (!STR_NULL(r, C_PG_NAME, i))
        p = attr_string(p, r, P_PG_NAME, STR(r, C_PG_NAME, i), STR_LEN(r, C_PG_NAME, i));
    p = peer_attrs(p, r, i);
    for (int k = 0; k < r->n_int_attrs; k++)
        if (!INT_NULL(r, I_INT_ATTRS + k, i))
            p = attr_varint(p, r, P_INT_ATTRS + k, T_INT64, (uint64_t)INT(r, I_INT_ATTRS + k, i));
    for (int k = 0; k < r->n_str_attrs; k++)
        if (!STR_NULL(r, C_STR_ATTRS + k, i))
            p = attr_string(p, r, P_INT_ATTRS + (int)r->n_int_attrs + k, STR(r, C_STR_ATTRS + k, i),
                            STR_LEN(r, C_STR_ATTRS + k, i));
    if (!STR_NULL(r, C_SPLITS, i)) p = bytes(p, STR(r, C_SPLITS, i), STR_LEN(r, C_SPLITS, i));
    int marks[8];
    int k = nulls(r, i, marks);
    if (k) {
        int64_t list = 0;
        for (int j = 0; j < k; j++) list += PIECE_LEN(r, marks[j]);
        int64_t inner = PIECE_LEN(r, P_NULLS) + 2 + vsize((uint64_t)list) + list;
        *p++ = T_ATTR;
        p = put(p, (uint64_t)inner);
        p = bytes(p, PIECE(r, P_NULLS), PIECE_LEN(r, P_NULLS));
        p = put(p, T_STRLIST);
        p = put(p, (uint64_t)list);
        for (int j = 0; j < k; j++) p = bytes(p, PIECE(r, marks[j]), PIECE_LEN(r, marks[j]));
    }
    int64_t e = r->extra_code[i];
    if (e >= 0) p = bytes(p, r->extra_data + r->extra_off[e], r->extra_off[e + 1] - r->extra_off[e]);
    return p;
}

_Static_assert(sizeof(et_rows) == ET_ROWS_WORDS * 8, "et_rows is ET_ROWS_WORDS 8-byte words");

/* Encode rows [row, n) into out (cap bytes), each as a varint length and a Node message, while
 * they surely fit; returns the first row not written and sets *written to the bytes written.
 * desc: the et_rows fields as ET_ROWS_WORDS 64-bit words in their order (pointers as addresses). */
int64_t et_encode_nodes(const int64_t *desc, int64_t row, uint8_t *out, int64_t cap, int64_t *written) {
    et_rows rows;
    memcpy(&rows, desc, sizeof rows);
    const et_rows *r = &rows;
    int64_t pos = 0;
    for (; row < r->n; row++) {
        if (pos + 10 + bound(r, row) > cap) break;
        uint8_t *body = out + pos + 10; /* room for the length, moved up once it is known */
        uint8_t *end = attrs(fields(body, r, row), r, row);
        if (end == body) end = attr_varint(body, r, P_PRESENT, T_BOOL, 1); /* protolib stops at an empty message */
        int64_t len = end - body;
        uint8_t *p = put(out + pos, (uint64_t)len);
        memmove(p, body, (size_t)len);
        pos = (p - out) + len;
    }
    *written = pos;
    return row;
}
