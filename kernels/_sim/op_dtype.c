/* canna simulator op library: conversions between tensor dtypes and the kernels' compute types.
 * Float -> integer conversions follow x86 (NaN / out of range -> the "integer indefinite" value,
 * narrower integers wrap), like PyTorch on the CPU, and never hit C's undefined behaviour. */
#include "opsim.h"

#pragma GCC optimize("O3")

/* read one element of dtype dt as double / int64 */
double nn_get_f64(const void *p, aclDataType dt)
{
    switch ((int)dt) {
    case ACL_FLOAT: { float v; memcpy(&v, p, 4); return v; }
    case ACL_DOUBLE: { double v; memcpy(&v, p, 8); return v; }
    case ACL_FLOAT16: { uint16_t v; memcpy(&v, p, 2); return nn_h2f(v); }
    case ACL_BF16: { uint16_t v; memcpy(&v, p, 2); return nn_b2f(v); }
    case ACL_INT8: return *(const int8_t *)p;
    case ACL_UINT8: return *(const uint8_t *)p;
    case ACL_BOOL: return *(const uint8_t *)p != 0;
    case ACL_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case ACL_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case ACL_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return 0;
    }
}

int64_t nn_get_i64(const void *p, aclDataType dt)
{
    switch ((int)dt) {
    case ACL_INT8: return *(const int8_t *)p;
    case ACL_UINT8: return *(const uint8_t *)p;
    case ACL_BOOL: return *(const uint8_t *)p != 0;
    case ACL_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case ACL_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case ACL_INT64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: return nn_d2i64(nn_get_f64(p, dt));
    }
}

/* element readers into each compute type */
#define RD_F(T, x) ((T)(x))
static inline float h2f(uint16_t v) { return nn_h2f(v); }
static inline float b2f(uint16_t v) { return nn_b2f(v); }

/* LOADN(ctype, dst, expression of src[i*stride]) */
#define LOAD_LOOP(CT, SRC_T, EXPR)                                                                  \
    do {                                                                                           \
        CT *d = dst;                                                                               \
        const SRC_T *s = src;                                                                      \
        if (stride == 1) {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                      \
                SRC_T x = s[i];                                                                    \
                d[i] = (CT)(EXPR);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                SRC_T x = s[i * stride];                                                           \
                d[i] = (CT)(EXPR);                                                                 \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define LOAD_ALL(CT)                                                                                \
    switch ((int)dt) {                                                                             \
    case ACL_FLOAT: LOAD_LOOP(CT, float, x); break;                                                \
    case ACL_DOUBLE: LOAD_LOOP(CT, double, x); break;                                              \
    case ACL_FLOAT16: LOAD_LOOP(CT, uint16_t, h2f(x)); break;                                      \
    case ACL_BF16: LOAD_LOOP(CT, uint16_t, b2f(x)); break;                                         \
    case ACL_INT8: LOAD_LOOP(CT, int8_t, x); break;                                                \
    case ACL_UINT8: LOAD_LOOP(CT, uint8_t, x); break;                                              \
    case ACL_BOOL: LOAD_LOOP(CT, uint8_t, x != 0); break;                                          \
    case ACL_INT16: LOAD_LOOP(CT, int16_t, x); break;                                              \
    case ACL_INT32: LOAD_LOOP(CT, int32_t, x); break;                                              \
    case ACL_INT64: LOAD_LOOP(CT, int64_t, x); break;                                              \
    default: memset(dst, 0, (size_t)n * sizeof(CT)); break;                                        \
    }

/* float sources into integer compute types go through the x86 rules */
#define LOAD_ALL_INT(CT, CONV)                                                                      \
    switch ((int)dt) {                                                                             \
    case ACL_FLOAT: LOAD_LOOP(CT, float, CONV(x)); break;                                          \
    case ACL_DOUBLE: LOAD_LOOP(CT, double, CONV(x)); break;                                        \
    case ACL_FLOAT16: LOAD_LOOP(CT, uint16_t, CONV(h2f(x))); break;                                \
    case ACL_BF16: LOAD_LOOP(CT, uint16_t, CONV(b2f(x))); break;                                   \
    case ACL_INT8: LOAD_LOOP(CT, int8_t, x); break;                                                \
    case ACL_UINT8: LOAD_LOOP(CT, uint8_t, x); break;                                              \
    case ACL_BOOL: LOAD_LOOP(CT, uint8_t, x != 0); break;                                          \
    case ACL_INT16: LOAD_LOOP(CT, int16_t, x); break;                                              \
    case ACL_INT32: LOAD_LOOP(CT, int32_t, x); break;                                              \
    case ACL_INT64: LOAD_LOOP(CT, int64_t, (uint64_t)x); break;                                    \
    default: memset(dst, 0, (size_t)n * sizeof(CT)); break;                                        \
    }

NN_CLONES void nn_load(int ct, void *dst, const void *src, int64_t stride, aclDataType dt, int64_t n)
{
    switch (ct) {
    case CT_F32: LOAD_ALL(float); break;
    case CT_F64: LOAD_ALL(double); break;
    case CT_I32: LOAD_ALL_INT(int32_t, nn_d2i32); break;
    case CT_I64: LOAD_ALL_INT(int64_t, nn_d2i64); break;
    default: break;
    }
}

#define STORE_LOOP(CT, DST_T, EXPR)                                                                 \
    do {                                                                                           \
        DST_T *d = dst;                                                                            \
        const CT *s = src;                                                                         \
        if (stride == 1) {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT x = s[i];                                                                       \
                d[i] = (DST_T)(EXPR);                                                              \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT x = s[i];                                                                       \
                d[i * stride] = (DST_T)(EXPR);                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* floating compute type -> any dtype */
#define STORE_FROM_FLOAT(CT)                                                                        \
    switch ((int)dt) {                                                                             \
    case ACL_FLOAT: STORE_LOOP(CT, float, x); break;                                               \
    case ACL_DOUBLE: STORE_LOOP(CT, double, x); break;                                             \
    case ACL_FLOAT16: STORE_LOOP(CT, uint16_t, nn_f2h((float)x)); break;                           \
    case ACL_BF16: STORE_LOOP(CT, uint16_t, nn_f2b((float)x)); break;                              \
    case ACL_INT8: STORE_LOOP(CT, int8_t, (uint64_t)nn_d2i64(x)); break;                           \
    case ACL_UINT8: STORE_LOOP(CT, uint8_t, (uint64_t)nn_d2i64(x)); break;                         \
    case ACL_BOOL: STORE_LOOP(CT, uint8_t, x != 0); break;                                         \
    case ACL_INT16: STORE_LOOP(CT, int16_t, (uint64_t)nn_d2i64(x)); break;                         \
    case ACL_INT32: STORE_LOOP(CT, int32_t, nn_d2i32(x)); break;                                   \
    case ACL_INT64: STORE_LOOP(CT, int64_t, nn_d2i64(x)); break;                                   \
    default: break;                                                                                \
    }

/* integer compute type -> any dtype (narrowing wraps) */
#define STORE_FROM_INT(CT)                                                                          \
    switch ((int)dt) {                                                                             \
    case ACL_FLOAT: STORE_LOOP(CT, float, x); break;                                               \
    case ACL_DOUBLE: STORE_LOOP(CT, double, x); break;                                             \
    case ACL_FLOAT16: STORE_LOOP(CT, uint16_t, nn_f2h((float)x)); break;                           \
    case ACL_BF16: STORE_LOOP(CT, uint16_t, nn_f2b((float)x)); break;                              \
    case ACL_INT8: STORE_LOOP(CT, int8_t, (uint64_t)x); break;                                     \
    case ACL_UINT8: STORE_LOOP(CT, uint8_t, (uint64_t)x); break;                                   \
    case ACL_BOOL: STORE_LOOP(CT, uint8_t, x != 0); break;                                         \
    case ACL_INT16: STORE_LOOP(CT, int16_t, (uint64_t)x); break;                                   \
    case ACL_INT32: STORE_LOOP(CT, int32_t, (uint64_t)x); break;                                   \
    case ACL_INT64: STORE_LOOP(CT, int64_t, x); break;                                             \
    default: break;                                                                                \
    }

NN_CLONES void nn_store(int ct, void *dst, int64_t stride, aclDataType dt, const void *src, int64_t n)
{
    switch (ct) {
    case CT_F32: STORE_FROM_FLOAT(float); break;
    case CT_F64: STORE_FROM_FLOAT(double); break;
    case CT_I32: STORE_FROM_INT(int32_t); break;
    case CT_I64: STORE_FROM_INT(int64_t); break;
    default: break;
    }
}
