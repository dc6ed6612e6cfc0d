/* register/tilingdata_base.h -- the tiling-data macros of a CANN op project's host side, for canna's
 * simulator: each BEGIN_TILING_DATA_DEF ... END_TILING_DATA_DEF block declares a plain struct of its
 * fields in order (natural alignment), the layout a kernel reads through its tiling GM_ADDR.
 *
 * An op project's kernel (op_kernel/x.cpp, reading `GET_TILING_DATA(t, tiling)`) runs in the
 * simulator with its host tiling header included first and the struct named:
 *
 *     kernels.RawModule(path="op_kernel/add_custom.cpp",
 *                       options=("-include", "op_host/add_custom_tiling.h",
 *                                "-DCANNA_TILING_DATA_TYPE=optiling::AddCustomTilingData"))
 *
 * The host-side methods of CANN's tiling classes (set_x, SaveToBuffer, ...) are not provided: on
 * the simulator the caller passes the struct's bytes (e.g. a NumPy structured array) as the tiling
 * argument.
 */
#ifndef CANNA_REGISTER_TILINGDATA_BASE_H
#define CANNA_REGISTER_TILINGDATA_BASE_H

#include <stdint.h>

#define BEGIN_TILING_DATA_DEF(name) struct name {
#define TILING_DATA_FIELD_DEF(type, field) type field
#define TILING_DATA_FIELD_DEF_ARR(type, count, field) type field[count]
#define TILING_DATA_FIELD_DEF_STRUCT(type, field) type field
#define END_TILING_DATA_DEF }
#define REGISTER_TILING_DATA_CLASS(op, type)

#endif /* CANNA_REGISTER_TILINGDATA_BASE_H */
