/* Device helpers of the wgmma kernels (prefill.cu, mid.cu, prefill_wide.cu):
 * bulk copies completing on mbarriers, cp.async, the wgmma fences / commit /
 * wait, the 128-byte-swizzle shared-memory descriptor, the m64nNk16 f16
 * wgmmas (A from registers or shared memory), the loads of A's raw tile and
 * its register fragment, the dequantization of B's packed code words into
 * the fp16 rows of a swizzled tile, and the epilogues. Include from .cu files
 * only.
 *
 * The kernels work on 128 (m) x BN (n) x 64 (k) CTA tiles, two consumer
 * warpgroups of 64 rows. The 64 k of a step are permuted the same way for A
 * and B (a dot product does not care): wgmma slice j (k16), slot 2t+e holds
 * k = 16t + j + 4e and slot 8+2t+e holds k = 16t + 8 + j + 4e, so a lane's A
 * fragment is one 8-byte load of one k-block with one scale, and packed B
 * code word c of a row dequantizes to the 8 consecutive fp16 of positions
 * 8c..8c+7 (nibble r of the word with the scale of k-block r). */
#ifndef FP4_SM90_WGMMA_CUH
#define FP4_SM90_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/sm90/device.cuh"

#define WG_BM 128     /* CTA rows (two warpgroups of 64) */
#define WG_BK 64      /* k per step */
#define WG_THREADS 256
#define WG_ROWB 32    /* fp4 code bytes of a row per step */

/* wgmma and setmaxnreg exist only on the sm_90a target */
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP4_SM90_HAVE_WGMMA 1
#endif

/* ---- bulk copies completing on an mbarrier (any sm_90+ target) --------------------- */

static __device__ __forceinline__ void wg_mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/* make the initialised mbarriers visible to the copy engine (then a barrier) */
static __device__ __forceinline__ void wg_mbar_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* arrive once and expect `bytes` more from bulk copies in this phase */
static __device__ __forceinline__ void wg_mbar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
/* bytes (multiple of 16, 16-byte aligned both sides) global -> shared, counted on bar */
static __device__ __forceinline__ void wg_bulk_g2s(uint32_t dst, const void *src, uint32_t bytes,
                                                   uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
/* arrive once (no transaction bytes) */
static __device__ __forceinline__ void wg_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* arrive once this thread's earlier cp.asyncs have landed, without waiting
 * for them (counted in the barrier's init count) */
static __device__ __forceinline__ void wg_cp_mbar_arrive(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
/* wait until the phase with this parity of bar completed */
static __device__ __forceinline__ void wg_mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nWG_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WG_MBAR_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* generic-proxy writes to shared memory (st.shared, cp.async) -> visible to
 * the tensor cores (async proxy); each writing thread, before the barrier */
static __device__ __forceinline__ void wg_fence_async_smem(void)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* ---- cp.async (any sm_80+ target) ------------------------------------------------ */

/* 16 bytes global -> shared, L2 only; src_bytes < 16 zero-fills the rest */
static __device__ __forceinline__ void wg_cp16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}

static __device__ __forceinline__ void wg_cp8(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}

static __device__ __forceinline__ void wg_cp4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src));
}

static __device__ __forceinline__ void wg_cp_commit(void) { asm volatile("cp.async.commit_group;"); }

/* wait until at most N of my committed cp.async groups are pending */
template <int N> static __device__ __forceinline__ void wg_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#ifdef FP4_SM90_HAVE_WGMMA
/* ---- wgmma ordering ---------------------------------------------------------------- */

static __device__ __forceinline__ void wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* compiler-level fence on registers the tensor cores own */
template <int NR> static __device__ __forceinline__ void wg_reg_fence(float *r)
{
#pragma unroll
    for (int i = 0; i < NR; i++) asm volatile("" : "+f"(r[i])::"memory");
}

/* The dynamic shared memory rounded up to 1024 bytes (the 128-byte swizzle's
 * alignment; the kernels ask for 1024 bytes more): its generic pointer, and
 * its shared-window address in *sbase. */
static __device__ __forceinline__ unsigned char *wg_smem_aligned(unsigned char *smem_raw,
                                                                  uint32_t *sbase)
{
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
    *sbase = raw + pad;
    return smem_raw + pad;
}

/* wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups
 * 1024 bytes apart (SBO), LBO unused for this layout (1). The tile must be
 * 1024-byte aligned; +2 per k16 slice (32 bytes). */
static __device__ __forceinline__ uint64_t wg_desc_sw128(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The wgmmas with A from registers, fp16 (the dense kernels) or bf16 (the MoE
 * kernel) operands: d (64 x N per warpgroup, fp32) += A (registers) x B
 * (shared); scale_d = 0 overwrites d. */
#define WG_ACC_STR_32 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_ACC_STR_64 WG_ACC_STR_32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_ACC_STR_128 WG_ACC_STR_64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define WG_ACC_OUT_32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WG_ACC_OUT_64 \
    WG_ACC_OUT_32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
    "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), \
    "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), \
    "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define WG_ACC_OUT_128 \
    WG_ACC_OUT_64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), \
    "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
    "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
    "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), \
    "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), \
    "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
    "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
    "+f"(d[127])
/* tail: A's four registers and the descriptor; pred: the scale_d operand */
#define WG_MMA_RS(name, shape, type, acc_str, acc_out, tail, pred)                                \
    static __device__ __forceinline__ void name(float *d, uint32_t a0, uint32_t a1, uint32_t a2,  \
                                                uint32_t a3, uint64_t desc, int scale_d)         \
    {                                                                                           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " pred ", 0;\n"                          \
                     "wgmma.mma_async.sync.aligned." shape ".f32." type "." type " {" acc_str   \
                     "}, " tail ", p, 1, 1, 0;\n}\n"                                            \
                     : acc_out                                                                  \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d));            \
    }
WG_MMA_RS(wg_mma_n256, "m64n256k16", "f16", WG_ACC_STR_128, WG_ACC_OUT_128, "{%128,%129,%130,%131}, %132", "%133")
WG_MMA_RS(wg_mma_n128, "m64n128k16", "f16", WG_ACC_STR_64, WG_ACC_OUT_64, "{%64,%65,%66,%67}, %68", "%69")
WG_MMA_RS(wg_mma_n64, "m64n64k16", "f16", WG_ACC_STR_32, WG_ACC_OUT_32, "{%32,%33,%34,%35}, %36", "%37")
WG_MMA_RS(wg_mma_bf16_n128, "m64n128k16", "bf16", WG_ACC_STR_64, WG_ACC_OUT_64, "{%64,%65,%66,%67}, %68", "%69")
WG_MMA_RS(wg_mma_bf16_n64, "m64n64k16", "bf16", WG_ACC_STR_32, WG_ACC_OUT_32, "{%32,%33,%34,%35}, %36", "%37")

/* The 4 wgmmas (k16 slices) of one k-step: BN / 2 accumulators per thread,
 * B tile at shared address btile (BN rows of 128 bytes, swizzled). */
template <int BN>
static __device__ __forceinline__ void wg_mma_step(float *acc, const uint32_t *afr, uint32_t btile,
                                                   bool first)
{
    const uint64_t desc = wg_desc_sw128(btile);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (BN == 256)
            wg_mma_n256(acc, afr[4 * j], afr[4 * j + 1], afr[4 * j + 2], afr[4 * j + 3],
                        desc + (uint64_t)(2 * j), (first && j == 0) ? 0 : 1);
        else if (BN == 128)
            wg_mma_n128(acc, afr[4 * j], afr[4 * j + 1], afr[4 * j + 2], afr[4 * j + 3],
                        desc + (uint64_t)(2 * j), (first && j == 0) ? 0 : 1);
        else
            wg_mma_n64(acc, afr[4 * j], afr[4 * j + 1], afr[4 * j + 2], afr[4 * j + 3],
                       desc + (uint64_t)(2 * j), (first && j == 0) ? 0 : 1);
    }
}

/* d (64 x N per warpgroup, fp32) += A (shared, fp16) x B (shared, fp16): both
 * operands by descriptor; scale_d = 0 overwrites d */
#define WG_MMA_SS(name, shape, acc_str, acc_out, tail, pred)                                       \
    static __device__ __forceinline__ void name(float *d, uint64_t desc_a, uint64_t desc_b,       \
                                                int scale_d)                                      \
    {                                                                                           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " pred ", 0;\n"                          \
                     "wgmma.mma_async.sync.aligned." shape ".f32.f16.f16 {" acc_str "}, " tail   \
                     ", p, 1, 1, 0, 0;\n}\n"                                                      \
                     : acc_out                                                                  \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                 \
    }
WG_MMA_SS(wg_mma_ss_n256, "m64n256k16", WG_ACC_STR_128, WG_ACC_OUT_128, "%128, %129", "%130")
WG_MMA_SS(wg_mma_ss_n128, "m64n128k16", WG_ACC_STR_64, WG_ACC_OUT_64, "%64, %65", "%66")

/* The 4 wgmmas of one k-step with both operands in shared memory: A's 64 x 64
 * tile at atile, B's BN x 64 at btile (both rows of 128 bytes, swizzled). */
template <int BN>
static __device__ __forceinline__ void wg_mma_ss_step(float *acc, uint32_t atile, uint32_t btile,
                                                      bool first)
{
    const uint64_t da = wg_desc_sw128(atile), db = wg_desc_sw128(btile);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int sd = (first && j == 0) ? 0 : 1;
        if (BN == 256)
            wg_mma_ss_n256(acc, da + (uint64_t)(2 * j), db + (uint64_t)(2 * j), sd);
        else
            wg_mma_ss_n128(acc, da + (uint64_t)(2 * j), db + (uint64_t)(2 * j), sd);
    }
}

/* ---- A: raw tile loads and the register fragment ------------------------------------- */

/* Issue the cp.asyncs of A's step ls: 128 rows x 32 code bytes into a_dst
 * (row r at r * 32) and the 512-byte swizzled scale tile (m-tile mt_blk,
 * k-step ls) into asf_dst, shared by the CTA's 256 threads. Rows past M and
 * bytes past K read nothing and are zero-filled. a16: row length (K/2) is a
 * multiple of 16. */
static __device__ __forceinline__ void wg_load_a(uint32_t a_dst, uint32_t asf_dst,
                                                 const uint8_t *__restrict__ aq,
                                                 const uint8_t *__restrict__ asf, int M, int arow,
                                                 bool a16, int m0, int mt_blk, int KS, int ls,
                                                 int tid)
{
    const int kbyte = ls * WG_ROWB;
    if (a16) {
#pragma unroll
        for (int i = 0; i < 256 / WG_THREADS; i++) { /* 256 chunks of 16 bytes */
            const int idx = tid + i * WG_THREADS, r = idx >> 1, c = (idx & 1) * 16, m = m0 + r;
            const bool ok = m < M && kbyte + c < arow;
            wg_cp16(a_dst + (uint32_t)(r * WG_ROWB + c), ok ? aq + (size_t)m * arow + kbyte + c : aq,
                    ok ? 16 : 0);
        }
    } else {
#pragma unroll 4
        for (int i = 0; i < 512 / WG_THREADS; i++) { /* 512 chunks of 8 bytes */
            const int idx = tid + i * WG_THREADS, r = idx >> 2, c = (idx & 3) * 8, m = m0 + r;
            const bool ok = m < M && kbyte + c < arow;
            wg_cp8(a_dst + (uint32_t)(r * WG_ROWB + c), ok ? aq + (size_t)m * arow + kbyte + c : aq,
                   ok ? 8 : 0);
        }
    }
    if (tid < 32)
        wg_cp16(asf_dst + (uint32_t)(tid * 16), asf + ((size_t)mt_blk * KS + ls) * 512 + tid * 16, 16);
}

/* A's wgmma register fragment of one step (16 registers: 4 k16 slices x
 * {rows g, g+8} x {k-halves}) from the raw tile: a lane (g, t) of warp w owns
 * rows 16w+g, 16w+g+8 and k-block t (one 8-byte load and one scale per row).
 */
static __device__ __forceinline__ void wg_a_frag(const unsigned char *a_tile,
                                                 const unsigned char *asf_tile, int tid,
                                                 uint32_t *afr)
{
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int r0 = (tid >> 5) * 16 + g; /* warp w of the CTA owns rows 16w..16w+15 */
    const uint2 x0 = *(const uint2 *)(a_tile + r0 * WG_ROWB + 8 * t);
    const uint2 x1 = *(const uint2 *)(a_tile + (r0 + 8) * WG_ROWB + 8 * t);
    const uint32_t s0 = asf_tile[(r0 & 31) * 16 + (r0 >> 5) * 4 + t];
    const uint32_t s1 = asf_tile[((r0 + 8) & 31) * 16 + ((r0 + 8) >> 5) * 4 + t];
    const uint32_t sc = sf2_to_h2((s0 | s1 << 16) << 7);
    const uint32_t lo = __byte_perm(sc, 0, 0x1010), hi = __byte_perm(sc, 0, 0x3232);
    {
        uint32_t p0x[4], p1x[4], p0y[4], p1y[4];
        fp4_nib_pairs4(x0.x, p0x);
        fp4_nib_pairs4(x1.x, p1x);
        fp4_nib_pairs4(x0.y, p0y);
        fp4_nib_pairs4(x1.y, p1y);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            afr[4 * j + 0] = hmul2_u32(p0x[j], lo);
            afr[4 * j + 1] = hmul2_u32(p1x[j], hi);
            afr[4 * j + 2] = hmul2_u32(p0y[j], lo);
            afr[4 * j + 3] = hmul2_u32(p1y[j], hi);
        }
    }
}

/* ---- epilogue ------------------------------------------------------------------------ */

/* D[m0.., n0..] = bf16(acc * alpha_eff) for the CTA tile, rows < M and
 * columns < N only. acc[4i + e] of lane (g, t) in warp w is (row 16w + g +
 * 8 (e >> 1), column 8i + 2t + (e & 1)); bf16x2 stores when N is even. */
template <int BN>
static __device__ __forceinline__ void wg_store_d(const float *acc, __nv_bfloat16 *__restrict__ d,
                                                  int M, int N, int m0, int n0, float alpha_eff,
                                                  int tid)
{
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int rbase = m0 + (tid >> 5) * 16 + g;
    const bool pair_ok = (N % 2) == 0;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = rbase + 8 * h;
        if (m >= M) continue;
        __nv_bfloat16 *drow = d + (size_t)m * N;
#pragma unroll
        for (int i = 0; i < BN / 8; i++) {
            const int n = n0 + 8 * i + 2 * t;
            const float v0 = acc[4 * i + 2 * h] * alpha_eff;
            const float v1 = acc[4 * i + 2 * h + 1] * alpha_eff;
            if (pair_ok && n + 1 < N) {
                *(__nv_bfloat162 *)(drow + n) = __floats2bfloat162_rn(v0, v1);
            } else {
                if (n < N) drow[n] = __float2bfloat16_rn(v0);
                if (n + 1 < N) drow[n + 1] = __float2bfloat16_rn(v1);
            }
        }
    }
}

/* ---- split-K slices epilogue (mid) -------------------------------------------------------
 * The S CTAs of a tile (grid.z; co-resident: cooperative launch) reduce their
 * fp32 partial tiles straight from the accumulators (no shared-memory
 * transposition): acc[4 i + e] of consumer thread tid is token 8 i + 2 t +
 * (e & 1), weight row 16 warp + g + 8 (e >> 1) of the tile. 1. store: each
 * thread writes its acc[4 i .. 4 i + 3] as one float4 at [i][tid] of this
 * split's slice of the tile's slab (wsf: [tile][S][BN / 8][256] float4s;
 * warp-contiguous, no atomics); 2. meet: per-tile arrival barrier (cnt[2
 * tile]; one thread's fence and atomic after the consumers' barrier, as a
 * grid sync does); 3. sum: CTA z sums the S slices of fragments i in
 * [z (BN / 8) / S, (z + 1) (BN / 8) / S) in split order (deterministic),
 * writes those D entries, and the last CTA to leave re-zeroes both counters
 * (every CTA has passed the barrier by then), so the next launch finds them
 * zero. Barriers: named barrier 1 over the 256 consumer threads (the whole
 * CTA). */
static __device__ __forceinline__ void wg_consumers_sync(void)
{
    asm volatile("bar.sync 1, %0;" ::"n"(WG_THREADS) : "memory");
}

template <int BN>
static __device__ __forceinline__ float4 *wg_slices_store(const float *acc, float *__restrict__ wsf,
                                                          int S, int tid)
{
    constexpr int NI = BN / 8; /* float4 fragments a thread */
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    float4 *slab = (float4 *)wsf + (size_t)tile * (size_t)S * (NI * WG_THREADS);
    float4 *mine = slab + (size_t)blockIdx.z * (NI * WG_THREADS);
#pragma unroll
    for (int i = 0; i < NI; i++)
        __stcg(mine + i * WG_THREADS + tid,
               make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    wg_consumers_sync(); /* the CTA's stores, then one gpu-scope fence (cumulative) and arrival */
    return slab;
}

static __device__ __forceinline__ void wg_slices_meet(unsigned *__restrict__ cnt, int S, int tid)
{
    unsigned *arrive = cnt + 2 * (blockIdx.y * gridDim.x + blockIdx.x);
    if (tid == 0) {
        __threadfence();
        atomicAdd(arrive, 1u);
        while (ld_acquire_gpu(arrive) < (unsigned)S) __nanosleep(64);
    }
    wg_consumers_sync();
}

template <int BN>
static __device__ __forceinline__ void wg_slices_sum(const float4 *slab, unsigned *__restrict__ cnt,
                                                     __nv_bfloat16 *__restrict__ d, int S, int tok0,
                                                     int m0, int N, int M, float alpha, int tid)
{
    constexpr int NI = BN / 8;
    const int z = blockIdx.z;
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int m = m0 + (tid >> 5) * 16 + g; /* weight row of e = 0, 1 (e = 2, 3: m + 8) */
    const int i0 = z * NI / S, i1 = (z + 1) * NI / S;
    for (int ib = i0; ib < i1; ib += 4) {
        float4 sum[4];
#pragma unroll
        for (int j = 0; j < 4; j++) sum[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 2
        for (int q = 0; q < S; q++) { /* 4 (8 unrolled) loads in flight a thread */
            const float4 *src = slab + (size_t)q * (NI * WG_THREADS) + tid;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (ib + j < i1) {
                    const float4 v = __ldcg(src + (ib + j) * WG_THREADS);
                    sum[j].x += v.x, sum[j].y += v.y, sum[j].z += v.z, sum[j].w += v.w;
                }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = tok0 + 8 * (ib + j) + 2 * t; /* token of e = 0, 2 (e = 1, 3: n + 1) */
            if (ib + j >= i1) continue;
            const float v[4] = {sum[j].x, sum[j].y, sum[j].z, sum[j].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ne = n + (e & 1), me = m + 8 * (e >> 1);
                if (ne < N && me < M) d[(size_t)ne * M + me] = __float2bfloat16_rn(v[e] * alpha);
            }
        }
    }
    wg_consumers_sync();
    unsigned *arrive = cnt + 2 * (blockIdx.y * gridDim.x + blockIdx.x), *depart = arrive + 1;
    if (tid == 0 && atomicAdd(depart, 1u) == (unsigned)(S - 1)) {
        *arrive = 0u;
        *depart = 0u;
    }
}

#endif /* FP4_SM90_HAVE_WGMMA */

/* ---- B: packed code word -> 16 bytes of a swizzled fp16 B row ------------------------ */

/* The 4 scale bytes of a packed B row's step (byte r = k-block r) as fp16x2
 * pairs of scale * 2^7. */
static __device__ __forceinline__ void wg_b_scales(uint32_t sw, uint32_t *sc)
{
#pragma unroll
    for (int r = 0; r < 4; r++)
        sc[r] = sf2_to_h2(__byte_perm(sw, 0, 0x4040u | (uint32_t)r | ((uint32_t)r << 8)) << 7);
}

/* One packed code word (positions 8c..8c+7 of the step) -> 8 fp16 of
 * value * scale * 2^-7 (exact), the 16-byte chunk c of the row. */
static __device__ __forceinline__ uint4 wg_b_word(uint32_t w, const uint32_t *sc)
{
    uint4 o;
    uint32_t p[4];
    fp4_nib_pairs4(w, p);
    o.x = hmul2_u32(p[0], sc[0]);
    o.y = hmul2_u32(p[1], sc[1]);
    o.z = hmul2_u32(p[2], sc[2]);
    o.w = hmul2_u32(p[3], sc[3]);
    return o;
}

#endif
