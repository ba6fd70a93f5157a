/* emuamx.h - scalar emulation of the AMX tile intrinsics kern_matmul_amx.c
 * uses (ldtilecfg, tileloadd, tilestored, tilezero, tdpbssd, tdpbusd,
 * tilerelease), so that file runs and is tested on a machine without AMX
 * (tests/tools/run_emu512.sh builds the kernel tests that way, under ASan +
 * UBSan in CI).
 *
 * Force-included after emu512.h (which brings <immintrin.h>): the
 * intrinsics become calls on eight thread-local 1 KiB tiles, each with the
 * instruction's documented semantics (Intel SDM, "Intel AMX instruction set
 * reference") and the checks whose failure faults on the hardware: a tile
 * used before a configuration, a configuration with reserved bytes set, or
 * rows > 16 or colsb > 64, and a product whose shapes disagree (rows of C
 * and A, colsb of C and B, colsb of A = 4 x rows of B) or whose tiles are not
 * distinct. Those print the reason and abort: a kernel bug, caught here
 * before it reaches an AMX machine. Loads and stores touch exactly rows x
 * colsb bytes at base + r * stride, so ASan sees what the hardware reads.
 * Test-only, and it knows only these instructions. */
#ifndef EMUAMX_H
#define EMUAMX_H

#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} emuamx_cfg;

static _Thread_local struct {
    int configured;
    emuamx_cfg cfg;
    uint8_t t[8][16][64];
} emuamx_state;

static void emuamx_fail(const char *what, int tile) {
    fprintf(stderr, "emuamx: %s (tile %d): this faults on an AMX CPU\n", what, tile);
    abort();
}

static void emuamx_check(int t) {
    if (!emuamx_state.configured)
        emuamx_fail("tile instruction before ldtilecfg", t);
    if (t < 0 || t > 7)
        emuamx_fail("no such tile", t);
    if (emuamx_state.cfg.rows[t] == 0 || emuamx_state.cfg.colsb[t] == 0)
        emuamx_fail("tile not configured", t);
    if (emuamx_state.cfg.colsb[t] % 4)
        emuamx_fail("tile colsb not a multiple of 4", t);
}

static __attribute__((noinline)) void emuamx_loadconfig(const void *p) {
    emuamx_cfg c;
    memcpy(&c, p, sizeof(c));
    if (c.palette_id == 0) { /* palette 0: the init state, as tilerelease */
        memset(&emuamx_state, 0, sizeof(emuamx_state));
        return;
    }
    if (c.palette_id != 1)
        emuamx_fail("palette other than 0 and 1", -1);
    /* start_row resumes an interrupted load or store; brisk never sets it
     * (and the hardware faults when it reaches a tile's rows). */
    if (c.start_row != 0)
        emuamx_fail("start_row set", -1);
    for (int i = 0; i < 14; i++)
        if (c.reserved[i])
            emuamx_fail("reserved configuration byte set", -1);
    for (int t = 0; t < 16; t++) {
        if (t >= 8 && (c.rows[t] || c.colsb[t]))
            emuamx_fail("tiles 8-15 configured", t);
        if (c.rows[t] > 16 || c.colsb[t] > 64)
            emuamx_fail("tile larger than 16 rows x 64 bytes", t);
        if ((c.rows[t] == 0) != (c.colsb[t] == 0))
            emuamx_fail("tile with rows or colsb zero but not both", t);
    }
    emuamx_state.cfg = c;
    emuamx_state.configured = 1;
    memset(emuamx_state.t, 0, sizeof(emuamx_state.t)); /* ldtilecfg zeroes the tiles */
}

static __attribute__((noinline)) void emuamx_release(void) {
    memset(&emuamx_state, 0, sizeof(emuamx_state));
}

static __attribute__((noinline)) void emuamx_zero(int t) {
    emuamx_check(t);
    memset(emuamx_state.t[t], 0, sizeof(emuamx_state.t[t]));
}

static __attribute__((noinline)) void emuamx_loadd(int t, const void *base, long stride) {
    emuamx_check(t);
    const int rows = emuamx_state.cfg.rows[t], colsb = emuamx_state.cfg.colsb[t];
    memset(emuamx_state.t[t], 0, sizeof(emuamx_state.t[t]));
    for (int r = 0; r < rows; r++)
        memcpy(emuamx_state.t[t][r], (const uint8_t *)base + (long)r * stride, (size_t)colsb);
}

static __attribute__((noinline)) void emuamx_stored(int t, void *base, long stride) {
    emuamx_check(t);
    const int rows = emuamx_state.cfg.rows[t], colsb = emuamx_state.cfg.colsb[t];
    for (int r = 0; r < rows; r++)
        memcpy((uint8_t *)base + (long)r * stride, emuamx_state.t[t][r], (size_t)colsb);
}

/* C[m][n] += sum over k < colsb(A)/4 and i < 4 of A[m][4k + i] * B[k][4n + i]
 * (int32 lanes, wrapping), A's bytes signed if sa, B's if sb. */
static __attribute__((noinline)) void emuamx_dp(int c, int a, int b, int sa, int sb) {
    emuamx_check(c);
    emuamx_check(a);
    emuamx_check(b);
    if (c == a || c == b || a == b)
        emuamx_fail("tdp* operands not distinct", c);
    const emuamx_cfg *g = &emuamx_state.cfg;
    if (g->rows[c] != g->rows[a] || g->colsb[c] != g->colsb[b] || g->colsb[a] != 4 * g->rows[b] ||
        g->colsb[c] % 4 || g->colsb[a] % 4)
        emuamx_fail("tdp* shapes disagree", c);
    const int M = g->rows[c], N = g->colsb[c] / 4, K = g->colsb[a] / 4;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, &emuamx_state.t[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t ua = emuamx_state.t[a][m][4 * k + i];
                    const uint8_t ub = emuamx_state.t[b][k][4 * n + i];
                    const int32_t va = sa ? (int32_t)(int8_t)ua : (int32_t)ua;
                    const int32_t vb = sb ? (int32_t)(int8_t)ub : (int32_t)ub;
                    acc += (uint32_t)(va * vb);
                }
            memcpy(&emuamx_state.t[c][m][4 * n], &acc, 4);
        }
}

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd
#undef _tile_dpbusd
#define _tile_loadconfig(p) emuamx_loadconfig(p)
#define _tile_release() emuamx_release()
#define _tile_zero(t) emuamx_zero(t)
#define _tile_loadd(t, base, stride) emuamx_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) emuamx_stored((t), (base), (long)(stride))
#define _tile_dpbssd(c, a, b) emuamx_dp((c), (a), (b), 1, 1)
#define _tile_dpbusd(c, a, b) emuamx_dp((c), (a), (b), 0, 1)

#endif
