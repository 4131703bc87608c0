/* fp4-sm90 v5-prefill host packing check (no GPU needed): every logical position of the
 * packed B, as the kernel dequantizes it (nibble, scale index), must hold the code and
 * scale at the physical k that the kernel's A fragment uses for the same wgmma slot.
 * Build: nvcc -gencode=arch=compute_90a,code=sm_90a -I include -I src bench/prefill5_packcheck.cu
 *        src/kernels/fp4_sm90_prefill5.cu src/format/nvfp4.c src/core/status.c */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fp4/format.h"
extern "C" {
size_t fp4_sm90_prefill5_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill5_scales_size(int64_t n, int64_t k);
void fp4_sm90_prefill5_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
}
/* CPU check of fp4_sm90_prefill5_pack_b: emulate the kernel's B dequant (nibble + scale index per logical position) and A fragment
 * (physical k per wgmma slot) and check the dot product order matches */
int main(void)
{
    int bad = 0;
    int shapes[][2] = {{200, 2880}, {8, 16}, {300, 48}, {256, 64}, {1, 80}};
    for (int si = 0; si < 5; si++) {
        int N = shapes[si][0], K = shapes[si][1];
        fp4_matrix b;
        fp4_err err;
        fp4_matrix_alloc(&b, N, K, &err);
        for (int i = 0; i < N * K / 2; i++) b.codes[i] = (uint8_t)(rand());
        for (int i = 0; i < N * K / 16; i++) b.scales[i] = (uint8_t)(rand() | 1);
        size_t cs = fp4_sm90_prefill5_codes_size(N, K), ss = fp4_sm90_prefill5_scales_size(N, K);
        uint8_t *c = (uint8_t *)malloc(cs), *s = (uint8_t *)malloc(ss);
        fp4_sm90_prefill5_pack_b(&b, c, s);
        int KS = (K + 63) / 64;
        for (int n = 0; n < N; n++)
            for (int st = 0; st < KS; st++) {
                int blk = n / 128, rr = n % 128;
                const uint8_t *B = c + ((size_t)blk * KS + st) * 4096;
                const uint8_t *S = s + ((size_t)blk * KS + st) * 512 + rr * 4;
                /* wgmma slice j, slot q: A side physical k */
                for (int j = 0; j < 4; j++)
                    for (int q = 0; q < 16; q++) {
                        int t = (q & 7) >> 1, e = q & 1, hi = q >> 3;
                        int ka = 16 * t + 8 * hi + j + 4 * e; /* from the kernel's A derivation */
                        int P = 16 * j + q;                   /* smem position */
                        int cc = P / 8, r = (P % 8) / 2, half = P % 2;
                        const uint8_t *w = B + (cc >> 2) * 2048 + rr * 16 + (cc & 3) * 4;
                        uint32_t word = w[0] | w[1] << 8 | w[2] << 16 | (uint32_t)w[3] << 24;
                        uint32_t nib = (word >> (4 * (r + 4 * half))) & 15;
                        uint32_t sc = S[r];
                        int k = 64 * st + ka;
                        uint32_t want = 0, wsc = 0;
                        if (k < K) {
                            want = (b.codes[(size_t)n * K / 2 + k / 2] >> (4 * (k & 1))) & 15;
                            wsc = b.scales[(size_t)n * (K / 16) + k / 16];
                        }
                        if (nib != want || (sc != wsc && want != 0) || (k < K && sc != wsc)) {
                            if (bad < 10)
                                printf("bad n %d st %d j %d q %d: nib %u want %u sc %u want %u\n", n, st, j, q,
                                       nib, want, sc, wsc);
                            bad++;
                        }
                    }
            }
        free(c), free(s);
        fp4_matrix_free(&b);
    }
    printf(bad ? "PACK BAD %d\n" : "PACK OK\n", bad);
    return 0;
}
