/* kq_dequant.c - a test tool: `kq_dequant TYPE N < blocks > floats` reads the
 * raw bytes of N values of GGML type id TYPE on stdin and writes the N
 * floats brisk's reference (kern_dequantize_row) gives, little-endian f32,
 * on stdout; with `--convert` it writes what the load-time conversion into
 * the type the matmul kernels run (kern_kq_run_type) dequantizes to instead,
 * with `--x8` what the CPU backend's X8 path converts to (Q6_K, Q3_K ->
 * Q6_0S, Q5_K -> Q5_1, IQ4_XS -> IQ4_NL; the others as kern_kq_run_type).
 * tests/integration/test_kquant_types.py compares both with the gguf
 * package's NumPy dequantizers. Exit 2 on bad arguments or short input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_kquant.h"
#include "kernels/cpu/kern_types.h"

int main(int argc, char **argv) {
    int convert = argc == 4 && strcmp(argv[3], "--convert") == 0;
    int x8 = argc == 4 && strcmp(argv[3], "--x8") == 0;
    if (argc != 3 && !convert && !x8) {
        fprintf(stderr, "usage: kq_dequant TYPE N [--convert|--x8] < blocks > floats\n");
        return 2;
    }
    long type = strtol(argv[1], NULL, 10), n = strtol(argv[2], NULL, 10);
    if (!kern_type_valid((uint32_t)type) || n <= 0 || n % kern_type_block_size((kern_type)type)) {
        fprintf(stderr, "kq_dequant: bad type %ld or count %ld\n", type, n);
        return 2;
    }
    kern_type t = (kern_type)type;
    size_t bytes = kern_row_bytes(t, n);
    unsigned char *in = malloc(bytes);
    float *out = malloc((size_t)n * sizeof *out);
    void *conv = malloc((size_t)n * 4 + 64);
    if (!in || !out || !conv || fread(in, 1, bytes, stdin) != bytes) {
        fprintf(stderr, "kq_dequant: want %zu bytes on stdin\n", bytes);
        return 2;
    }
    if ((convert || x8) && kern_kq_is(t)) {
        kern_type rt = kern_kq_run_type(t);
        if (x8 && (t == KERN_TYPE_Q6_K || t == KERN_TYPE_Q3_K))
            rt = KERN_TYPE_Q6_0S;
        else if (x8 && t == KERN_TYPE_Q5_K)
            rt = KERN_TYPE_Q5_1;
        else if (x8 && t == KERN_TYPE_IQ4_XS)
            rt = KERN_TYPE_IQ4_NL;
        if (kern_kq_convert_row(t, in, rt, conv, n) < 0) {
            float *f = malloc((size_t)n * sizeof *f);
            kern_dequantize_row(t, in, f, n);
            kern_quantize_row(rt, f, conv, n);
            free(f);
        }
        kern_dequantize_row(rt, conv, out, n);
    } else {
        kern_dequantize_row(t, in, out, n);
    }
    fwrite(out, sizeof *out, (size_t)n, stdout);
    free(in), free(out), free(conv);
    return 0;
}
