/* The MoE backends compiled in, the step names and the checks every MoE
 * backend relies on (fp4/moe_backend.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/backends.h" /* fp4_plugin_open */
#include "backends/moe_backends.h"
#include "fp4/moe_backend.h"

/* Order matters (fp4bench moe lists and runs them so): the reference, the
 * vendor baselines, the per-expert loop of our dense kernel, our grouped one. */
static const fp4_moe_backend_ops *const builtin_moe_backends[] = {
    &fp4_moe_backend_cpu_ref,
#ifdef FP4_HAVE_CUDA
    &fp4_moe_backend_cublas_bf16,
    &fp4_moe_backend_cublaslt_fp8,
    &fp4_moe_backend_loop_fp4,
    &fp4_moe_backend_fp4_sm90,
#endif
};

int fp4_moe_backend_count(void)
{
    return (int)(sizeof builtin_moe_backends / sizeof builtin_moe_backends[0]);
}

const fp4_moe_backend_ops *fp4_moe_backend_at(int i)
{
    if (i < 0 || i >= fp4_moe_backend_count()) return NULL;
    return builtin_moe_backends[i];
}

const fp4_moe_backend_ops *fp4_moe_backend_find(const char *name)
{
    for (int i = 0; name && i < fp4_moe_backend_count(); i++)
        if (strcmp(builtin_moe_backends[i]->name, name) == 0) return builtin_moe_backends[i];
    return NULL;
}

const char *fp4_moe_step_name(fp4_moe_step s)
{
    switch (s) {
    case FP4_MOE_STEP_GATE_UP: return "gate_up";
    case FP4_MOE_STEP_DOWN: return "down";
    case FP4_MOE_STEP_LAYER: return "layer";
    }
    return NULL;
}

fp4_status fp4_moe_step_parse(const char *name, fp4_moe_step *out, fp4_err *err)
{
    for (int s = 0; name && s < FP4_MOE_STEP_COUNT; s++)
        if (strcmp(name, fp4_moe_step_name((fp4_moe_step)s)) == 0) {
            *out = (fp4_moe_step)s;
            return FP4_OK;
        }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "unknown step '%s' (known: gate_up, down, layer)",
                    name ? name : "(null)");
}

int64_t fp4_moe_output_rows(const fp4_moe_problem *p)
{
    return p->step == FP4_MOE_STEP_GATE_UP ? p->tokens * p->dims.top_k : p->tokens;
}

int64_t fp4_moe_output_cols(const fp4_moe_problem *p)
{
    return p->step == FP4_MOE_STEP_GATE_UP ? 2 * p->dims.inter : p->dims.hidden;
}

/* Largest number of copies a plan takes (a sanity bound, as FP4_MAX_COPIES). */
#define MOE_MAX_COPIES 4096

fp4_status fp4_moe_problem_check(const fp4_moe_problem *p, int copies, fp4_err *err)
{
    fp4_status st;
    if (!p || !p->routing || !p->plan || !p->weights)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: NULL problem, routing, plan or weights");
    if ((st = fp4_moe_dims_check(&p->dims, err)) != FP4_OK) return st;
    if (!fp4_moe_step_name(p->step) || !fp4_moe_mode_name(p->mode))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: unknown step %d or mode %d",
                        (int)p->step, (int)p->mode);
    if (copies < 1 || copies > MOE_MAX_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: copies = %d, want 1..%d", copies,
                        MOE_MAX_COPIES);
    const fp4_moe_routing *r = p->routing;
    const fp4_moe_plan *pl = p->plan;
    if (p->tokens < 1 || r->tokens != p->tokens || pl->tokens != p->tokens ||
        r->experts != p->dims.experts || pl->experts != p->dims.experts ||
        r->top_k != p->dims.top_k || pl->top_k != p->dims.top_k ||
        pl->pairs != p->tokens * p->dims.top_k || !pl->expert_offsets || !pl->pair_index ||
        !pl->pair_row || !r->expert_ids || !r->weights)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "MoE problem: routing or plan do not match %lld tokens, %d experts, top-k %d",
                        (long long)p->tokens, p->dims.experts, p->dims.top_k);
    if (pl->expert_offsets[0] != 0 || (int64_t)pl->expert_offsets[pl->experts] != pl->pairs)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: the plan's offsets do not span its pairs");
    if ((st = fp4_moe_weights_check(&p->dims, p->weights, err)) != FP4_OK) return st;
    const int64_t want_rows = p->step == FP4_MOE_STEP_DOWN ? pl->pairs : p->tokens;
    const int64_t want_cols = p->step == FP4_MOE_STEP_DOWN ? p->dims.inter : p->dims.hidden;
    if (p->a_rows != want_rows || p->a_cols != want_cols)
        return fp4_fail(err, FP4_ERR_SHAPE, "MoE problem: the %s input is %lldx%lld, expected %lldx%lld",
                        fp4_moe_step_name(p->step), (long long)p->a_rows, (long long)p->a_cols,
                        (long long)want_rows, (long long)want_cols);
    if (!p->a_bf16 || !p->a_bf16_odd)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: no bf16 input (a_bf16, a_bf16_odd)");
    if (p->mode == FP4_MOE_W4A4) {
        const fp4_matrix *m[2] = {p->a, p->a_odd};
        for (int i = 0; i < 2; i++)
            if (!m[i] || !m[i]->codes || !m[i]->scales || m[i]->rows != want_rows ||
                m[i]->cols != want_cols)
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "MoE problem: W4A4 needs the NVFP4 input%s [%lld, %lld]",
                                i ? " of odd copies" : "", (long long)want_rows, (long long)want_cols);
        if (!(p->a_encode_scale > 0.0f) || !isfinite(p->a_encode_scale))
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: encode scale %g of the input",
                            (double)p->a_encode_scale);
        if (p->step == FP4_MOE_STEP_LAYER && (!(p->h_encode_scale > 0.0f) || !isfinite(p->h_encode_scale)))
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: a W4A4 layer needs a static encode "
                            "scale for h (got %g)", (double)p->h_encode_scale);
    }
    if (!p->weights_id) return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE problem: weights_id 0");
    return FP4_OK;
}

/* Longest name a row keeps (FP4_NAME_LEN - 1 in fp4/engine.h, a layer above). */
#define MOE_BACKEND_NAME_MAX 47

fp4_status fp4_moe_backend_validate(const fp4_moe_backend_ops *ops, fp4_err *err)
{
    const unsigned known = FP4_BACKEND_GPU | FP4_BACKEND_REFERENCE | FP4_BACKEND_LOSSY;
    if (!ops) return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend table is NULL");
    if (ops->api_version != FP4_MOE_BACKEND_API_VERSION)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "MoE backend API version %d, this fp4bench speaks %d",
                        ops->api_version, FP4_MOE_BACKEND_API_VERSION);
    if (!ops->name || !ops->name[0] || strnlen(ops->name, MOE_BACKEND_NAME_MAX + 1) > MOE_BACKEND_NAME_MAX)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend name empty or longer than %d bytes",
                        MOE_BACKEND_NAME_MAX);
    if (strcmp(ops->name, "all") == 0) /* --backend all means every backend */
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend named 'all'");
    for (const char *c = ops->name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' ||
              *c == '.'))
            return fp4_fail(err, FP4_ERR_INVALID_ARG,
                            "MoE backend name has a character other than a-z, 0-9, '-', '_', '.'");
    if (!ops->summary || !ops->open || !ops->close || !ops->prepare || !ops->poison || !ops->run ||
        !ops->read_output || !ops->release)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' lacks its summary or a mandatory "
                        "function", ops->name);
    if (ops->flags & ~known)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' has unknown flags 0x%x", ops->name,
                        ops->flags & ~known);
    if ((int)ops->math < (int)FP4_MATH_CPU || (int)ops->math > (int)FP4_MATH_FP4_TC)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' has an unknown math kind %d", ops->name,
                        (int)ops->math);
    /* the bytes of a row (GB/s, % of the read bandwidth) are counted in this format */
    if ((int)ops->wformat < (int)FP4_MOE_WEIGHTS_NVFP4 || (int)ops->wformat > (int)FP4_MOE_WEIGHTS_BF16)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' has an unknown weight format %d",
                        ops->name, (int)ops->wformat);
    if (!isfinite(ops->tol_max) || ops->tol_max < 0 || !isfinite(ops->tol_norm) || ops->tol_norm < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' has tolerances %g, %g", ops->name,
                        ops->tol_max, ops->tol_norm);
    if (ops->own_reference && !(isfinite(ops->own_tol) && ops->own_tol > 0))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' has own_reference with own_tol %g",
                        ops->name, ops->own_tol);
    if (ops->step_count && (!ops->step_name || !ops->run_step))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE backend '%s' has step_count without step_name "
                        "and run_step", ops->name);
    return FP4_OK;
}

fp4_status fp4_moe_backend_load(const char *path, const fp4_moe_backend_ops **ops, void **handle,
                                fp4_err *err)
{
    if (!path || !ops || !handle)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_moe_backend_load: NULL argument");
    *ops = NULL;
    void *h, *entry;
    fp4_status st = fp4_plugin_open(path, FP4_MOE_BACKEND_ENTRY_SYMBOL, &h, &entry, err);
    if (st != FP4_OK) {
        *handle = NULL;
        return st;
    }
    union { /* object pointer to function pointer without the cast warning */
        void *obj;
        fp4_moe_backend_entry_fn fn;
    } sym;
    sym.obj = entry;
    const fp4_moe_backend_ops *table = sym.fn();
    st = fp4_moe_backend_validate(table, err);
    if (st == FP4_OK && fp4_moe_backend_find(table->name)) /* rows are told apart by name */
        st = fp4_fail(err, FP4_ERR_INVALID_ARG, "its backend is named '%s', as a built-in MoE backend is",
                      table->name);
    if (st == FP4_OK && (table->flags & FP4_BACKEND_REFERENCE))
        st = fp4_fail(err, FP4_ERR_INVALID_ARG, "its backend '%s' claims FP4_BACKEND_REFERENCE: the exact "
                      "reference is moe-cpu-ref's, a plugin is a contender", table->name);
    if ((st = fp4_plugin_finish(path, h, st, handle, err)) == FP4_OK) *ops = table;
    return st;
}

void fp4_moe_backend_unload(void *handle)
{
    fp4_backend_unload(handle);
}
