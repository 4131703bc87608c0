/* fp4bench quantize / gemm / check: real tensors in files. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/backend.h"
#include "fp4/engine.h"
#include "fp4/io.h"
#include "fp4/reference.h"

static const char quantize_usage[] =
    "usage: fp4bench quantize --in X.npy --out W.safetensors [--encode-scale F] [--input-scale F]\n"
    "\n"
    "Quantize a 2-D float32/float16/bf16 .npy [rows, K] (K a multiple of 16) to NVFP4 the way\n"
    "inference engines do (global encode scale 2688/amax unless --encode-scale is given) and\n"
    "write a ModelOpt-style safetensors: weight U8 [rows, K/2], weight_scale F8_E4M3\n"
    "[rows, K/16], weight_scale_2 F32 (decode scale), input_scale F32 if given.\n";

static const char gemm_usage[] =
    "usage: fp4bench gemm --a A.safetensors --b B.safetensors --out D.npy [--backend NAME]\n"
    "                     [--a-name LAYER] [--b-name LAYER] [--plugin FILE.so]\n"
    "\n"
    "D[M,N] = A[M,K] * B[N,K]^T * alpha (alpha = product of the weight_scale_2 values), written\n"
    "as float32 .npy. Default backend cpu-ref (exact), or the plugin's backend when one\n"
    "--plugin is given. Other backends are verified against the reference after running;\n"
    "exit 1 if their result is out of tolerance, or if any output is NaN/Inf (written as\n"
    "computed: the product overflowed fp32).\n"
    "\n"
    "  --a-name, --b-name LAYER   one layer of a whole model's checkpoint: the tensors\n"
    "                             LAYER.weight, LAYER.weight_scale, LAYER.weight_scale_2\n"
    "                             (e.g. model.layers.3.mlp.experts.7.down_proj); without\n"
    "                             them the file holds one layer under the bare names\n"
    "  --plugin FILE.so           load an external backend (repeatable); --backend picks\n"
    "                             among them and the built-in ones (fp4bench list)\n";

static const char check_usage[] =
    "usage: fp4bench check --a A.safetensors --b B.safetensors --d THEIRS.npy\n"
    "                      [--a-name LAYER] [--b-name LAYER] [--tol-max F] [--tol-norm F]\n"
    "\n"
    "Compare another kernel's output D [M,N] (float32/float16/bf16 .npy) with the exact\n"
    "reference for A and B. Prints max|D-R|/max|R|, ||D-R||/||R|| and NaN/Inf counts.\n"
    "Defaults: --tol-max 0.01 --tol-norm 0.005 (a bf16 output with fp32 accumulation).\n"
    "--a-name / --b-name pick one layer of a whole model's checkpoint (see gemm --help).\n"
    "Exit 0 when within tolerance, 1 on mismatch.\n";

#define GEMM_MAX_PLUGINS 8

/* One operand: a checkpoint file and, in a whole model's checkpoint, the
 * layer's name prefix (NULL: the bare names). */
typedef struct operand {
    const char *path;
    const char *layer;
    const char *flag;      /* "--a" or "--b", for messages */
    char label[320];       /* "PATH" or "PATH (layer LAYER)" */
} operand;

/* A flag value that must be a positive, finite fp32 (after the conversion:
 * 1e39 is a fine double but an infinite float). */
static float positive_float(const cli_args *a, const char *flag, const char *s)
{
    double d = cli_double(a, flag, s);
    float f = (float)d;
    if (!(d > 0) || !isfinite(f) || f < FLT_MIN)
        cli_usage_error(a, "%s must be a positive normal fp32 number (got %s)", flag, s);
    return f;
}

/* A given --encode-scale that does not fit the tensor: every nonzero block's
 * scale rounding to 0 (the tensor all zeros) or clipped at E4M3's largest
 * (every value clipped) is an error; some blocks clipped (as a calibrated
 * scale clips an outlier) or zeroed are a warning; both with the scale that
 * fits. */
static void check_encode_scale(const cli_args *a, const float *x, const fp4_matrix *m, float encode_scale)
{
    long long nonzero = 0, zeroed = 0, clipped = 0;
    const long long blocks = (long long)m->rows * (m->cols / FP4_BLOCK);
    float amax = 0.0f;
    for (long long b = 0; b < blocks; b++) {
        float bm = 0.0f;
        for (int i = 0; i < FP4_BLOCK; i++) bm = fmaxf(bm, fabsf(x[b * FP4_BLOCK + i]));
        amax = fmaxf(amax, bm);
        if (bm == 0.0f) continue;
        nonzero++;
        if (fp4_e4m3_decode(m->scales[b]) == 0.0f) zeroed++;
        else if ((double)encode_scale * (bm / FP4_E2M1_MAX) > FP4_E4M3_MAX) clipped++;
    }
    const double fits = fp4_global_encode_scale(amax);
    if (nonzero > 0 && zeroed == nonzero)
        cli_usage_error(a, "--encode-scale %g: every block's scale rounds to 0 in E4M3, so the tensor "
                           "would be all zeros; its largest |x| is %g, which scale %g fits",
                        (double)encode_scale, (double)amax, fits);
    if (nonzero > 0 && clipped == nonzero)
        cli_usage_error(a, "--encode-scale %g: every block's scale is clipped at E4M3's largest, so every "
                           "value would be clipped; its largest |x| is %g, which scale %g fits",
                        (double)encode_scale, (double)amax, fits);
    if (clipped)
        fprintf(stderr, "%s: warning: --encode-scale %g clips %lld of %lld blocks at E4M3's largest scale "
                        "(%g fits the largest |x|, %g)\n",
                a->cmd, (double)encode_scale, clipped, nonzero, fits, (double)amax);
    if (zeroed)
        fprintf(stderr, "%s: warning: --encode-scale %g rounds %lld of %lld blocks to 0 (%g fits the "
                        "largest |x|, %g)\n",
                a->cmd, (double)encode_scale, zeroed, nonzero, fits, (double)amax);
}

int cmd_quantize(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench quantize"};
    const char *in = NULL, *out = NULL, *v;
    float encode_scale = 0, input_scale = -1;
    float *x = NULL, *dq = NULL;
    int64_t rows, cols;
    fp4_matrix m;
    fp4_err err;
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(quantize_usage, stdout);
            return 0;
        } else if (cli_value(&a, "--in", &v)) {
            in = v;
        } else if (cli_value(&a, "--out", &v)) {
            out = v;
        } else if (cli_value(&a, "--encode-scale", &v)) {
            encode_scale = positive_float(&a, "--encode-scale", v);
        } else if (cli_value(&a, "--input-scale", &v)) {
            input_scale = positive_float(&a, "--input-scale", v);
        } else {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        }
    }
    if (!in) cli_usage_error(&a, "--in is required");
    if (!out) cli_usage_error(&a, "--out is required");
    cli_distinct_files(&a, "--out", out, "--in", in);
    if (fp4_npy_read_matrix_f32(in, &x, &rows, &cols, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (fp4_quantize_f32(x, rows, cols, encode_scale, &m, &err) != FP4_OK) {
        fp4_err named;
        free(x);
        fp4_fail(&named, err.status, "%s: %s", in, fp4_err_text(&err));
        cli_die(a.cmd, &named);
    }
    if (encode_scale > 0) check_encode_scale(&a, x, &m, encode_scale);
    if (fp4_nvfp4_save(out, &m, input_scale, &err) != FP4_OK) cli_die(a.cmd, &err);
    /* how much quantization changed the tensor */
    double num = 0, den = 0, amax = 0;
    dq = malloc((size_t)rows * (size_t)cols * sizeof *dq);
    if (dq && fp4_dequantize_f32(&m, dq, &err) == FP4_OK) {
        for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) {
            num += (double)(dq[i] - x[i]) * (dq[i] - x[i]);
            den += (double)x[i] * x[i];
            if (fabs(x[i]) > amax) amax = fabs(x[i]);
        }
    }
    printf("%s [%lld, %lld] -> %s: weight U8 [%lld, %lld], weight_scale F8_E4M3 [%lld, %lld], "
           "weight_scale_2 %.9g\n",
           in, (long long)rows, (long long)cols, out, (long long)rows, (long long)(cols / 2),
           (long long)rows, (long long)(cols / 16), m.global_scale);
    printf("amax %.6g; quantization error ||Q-X||/||X|| = %.4g\n", amax,
           den > 0 ? sqrt(num / den) : 0.0);
    free(dq);
    free(x);
    fp4_matrix_free(&m);
    return 0;
}

/* The value of --a-name / --b-name: a layer's name prefix, never empty
 * (the bare names are what no flag means). */
static const char *layer_flag(const cli_args *a, const char *flag, const char *v)
{
    if (!v[0])
        cli_usage_error(a, "%s needs a layer name (e.g. model.layers.3.mlp.experts.7.down_proj)", flag);
    return v;
}

/* The operand options gemm and check share (--a, --b, --a-name, --b-name):
 * if argv[i] is one, its value into oa or ob, advance and return 1. */
static int operand_option(cli_args *a, operand *oa, operand *ob)
{
    const char *v;
    if (cli_value(a, "--a", &v)) {
        oa->path = v;
    } else if (cli_value(a, "--b", &v)) {
        ob->path = v;
    } else if (cli_value(a, "--a-name", &v)) {
        oa->layer = layer_flag(a, "--a-name", v);
    } else if (cli_value(a, "--b-name", &v)) {
        ob->layer = layer_flag(a, "--b-name", v);
    } else {
        return 0;
    }
    return 1;
}

/* Load one operand: a layer name the loader refuses is a usage error; a
 * missing tensor of a file read without a name says which flag picks one. */
static void load_operand(const cli_args *a, operand *op, fp4_matrix *m)
{
    fp4_err err;
    fp4_status st;
    if (!op->path) cli_usage_error(a, "%s is required", op->flag);
    if (op->layer)
        snprintf(op->label, sizeof op->label, "%s (layer %s)", op->path, op->layer);
    else
        snprintf(op->label, sizeof op->label, "%s", op->path);
    st = fp4_nvfp4_load_layer(op->path, op->layer, m, NULL, &err);
    if (st == FP4_OK) return;
    if (st == FP4_ERR_INVALID_ARG && op->layer) cli_usage_error(a, "%s-name: %s", op->flag, err.msg);
    if (st == FP4_ERR_NOT_FOUND && !op->layer) {
        fp4_err hinted;
        fp4_fail(&hinted, st, "%s (%s-name LAYER picks a layer)", err.msg, op->flag);
        cli_die(a->cmd, &hinted);
    }
    cli_die(a->cmd, &err);
}

/* Load A and B and check they can be multiplied. */
static void load_operands(const cli_args *a, operand *oa, operand *ob, fp4_matrix *ma, fp4_matrix *mb)
{
    fp4_err err;
    if (!oa->path) cli_usage_error(a, "--a is required");
    if (!ob->path) cli_usage_error(a, "--b is required");
    load_operand(a, oa, ma);
    load_operand(a, ob, mb);
    float alpha = ma->global_scale * mb->global_scale;
    if (!isfinite(alpha) || !(alpha > 0)) {
        fp4_fail(&err, FP4_ERR_FORMAT,
                 "weight_scale_2 of %s (%g) times that of %s (%g) is %g: not a usable alpha", oa->label,
                 ma->global_scale, ob->label, mb->global_scale, alpha);
        cli_die(a->cmd, &err);
    }
    if (ma->cols != mb->cols) {
        fp4_fail(&err, FP4_ERR_SHAPE, "%s has K=%lld but %s has K=%lld", oa->label, (long long)ma->cols,
                 ob->label, (long long)mb->cols);
        cli_die(a->cmd, &err);
    }
}

/* The backend called name: a loaded plugin's or a built-in one; NULL if none. */
static const fp4_backend_ops *find_backend(const char *name, const fp4_backend_ops *const *plugins,
                                           int nplugins)
{
    for (int i = 0; i < nplugins; i++)
        if (strcmp(plugins[i]->name, name) == 0) return plugins[i];
    return fp4_backend_find(name);
}

static float *reference_of(const cli_args *a, const fp4_matrix *ma, const fp4_matrix *mb)
{
    fp4_err err;
    float *r = malloc((size_t)ma->rows * (size_t)mb->rows * sizeof *r);
    if (!r) {
        fp4_fail(&err, FP4_ERR_NOMEM, "no memory for the reference output");
        cli_die(a->cmd, &err);
    }
    if (fp4_gemm_reference(ma, mb, ma->global_scale * mb->global_scale, r, 0, &err) != FP4_OK)
        cli_die(a->cmd, &err);
    return r;
}

int cmd_gemm(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench gemm",
                  .repeatable = "--plugin"};
    operand oa = {NULL, NULL, "--a", ""}, ob = {NULL, NULL, "--b", ""};
    const char *out = NULL, *name = NULL, *v;
    const fp4_backend_ops *plugins[GEMM_MAX_PLUGINS];
    void *plugin_handles[GEMM_MAX_PLUGINS];
    int nplugins = 0;
    fp4_matrix ma, mb;
    fp4_err err;
    void *inst = NULL, *plan = NULL;
    int rc = 0;
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(gemm_usage, stdout);
            return 0;
        } else if (operand_option(&a, &oa, &ob)) {
        } else if (cli_value(&a, "--out", &v)) {
            out = v;
        } else if (cli_value(&a, "--backend", &v)) {
            name = v;
        } else if (cli_value(&a, "--plugin", &v)) {
            if (nplugins == GEMM_MAX_PLUGINS)
                cli_usage_error(&a, "--plugin: at most %d plugins", GEMM_MAX_PLUGINS);
            if (fp4_backend_load(v, &plugins[nplugins], &plugin_handles[nplugins], &err) != FP4_OK)
                cli_die(a.cmd, &err);
            if (find_backend(plugins[nplugins]->name, plugins, nplugins))
                cli_usage_error(&a, "--plugin: a backend named '%s' is already loaded",
                                plugins[nplugins]->name);
            nplugins++;
        } else {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        }
    }
    /* a plugin is loaded to be run: alone, it is the default */
    if (!name && nplugins > 1)
        cli_usage_error(&a, "--backend is needed to pick one of the %d plugins", nplugins);
    if (!name) name = nplugins == 1 ? plugins[0]->name : "cpu-ref";
    const fp4_backend_ops *ops = find_backend(name, plugins, nplugins);
    if (!ops) cli_usage_error(&a, "--backend: unknown backend '%s' (see fp4bench list)", name);
    if (!out) cli_usage_error(&a, "--out is required");
    cli_distinct_files(&a, "--out", out, "--a", oa.path);
    cli_distinct_files(&a, "--out", out, "--b", ob.path);
    load_operands(&a, &oa, &ob, &ma, &mb);
    fp4_shape shape = {ma.rows, mb.rows, ma.cols};
    if (fp4_shape_check(&shape, &err) != FP4_OK) cli_die(a.cmd, &err);
    fp4_gemm_problem p = {.shape = shape, .a = &ma, .b = &mb, .alpha = ma.global_scale * mb.global_scale};
    size_t n = (size_t)shape.m * (size_t)shape.n;
    float *d = malloc(n * sizeof *d);
    if (!d) {
        fp4_fail(&err, FP4_ERR_NOMEM, "no memory for the output");
        cli_die(a.cmd, &err);
    }
    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    fp4_status st = ops->open(&inst, &err);
    int opened = st == FP4_OK;
    if (st == FP4_OK && ops->set_warnings) ops->set_warnings(inst, &warn);
    if (st == FP4_OK && ops->supports) st = ops->supports(inst, &shape, &err);
    if (st == FP4_OK && (st = ops->prepare(inst, &p, 1, &plan, &err)) != FP4_OK) plan = NULL;
    if (st == FP4_OK) st = ops->poison(plan, 0, NULL, &err);
    if (st == FP4_OK) st = ops->run(plan, 0, NULL, &err);
    if (st == FP4_OK) st = ops->read_output(plan, 0, d, &err);
    if (plan) ops->release(plan);
    if (opened) ops->close(inst);
    cli_print_warnings(&warn);
    if (st != FP4_OK) {
        fp4_err named;
        fp4_fail(&named, st, "backend %s: %s", name, fp4_err_text(&err));
        cli_die(a.cmd, &named);
    }
    fp4_tensor t = {.dtype = FP4_DT_F32, .ndim = 2, .shape = {shape.m, shape.n}, .data = d,
                    .nbytes = n * sizeof *d};
    if (fp4_npy_write(out, &t, &err) != FP4_OK) cli_die(a.cmd, &err);
    printf("D [%lld, %lld] float32 -> %s (backend %s, alpha %.9g)\n", (long long)shape.m,
           (long long)shape.n, out, name, p.alpha);
    size_t nonfinite = 0;
    for (size_t i = 0; i < n; i++) nonfinite += !isfinite(d[i]);
    if (nonfinite) { /* written, as computed, but no usable result */
        fprintf(stderr, "%s: %zu of %zu outputs are NaN/Inf (the product overflows fp32: see the "
                        "global scales)\n", a.cmd, nonfinite, n);
        rc = EXIT_CHECK;
    }
    if (!(ops->flags & FP4_BACKEND_REFERENCE)) {
        fp4_verdict vd;
        float *r = reference_of(&a, &ma, &mb);
        fp4_compare_outputs(d, r, n, ops->tol_max, ops->tol_norm, &vd);
        printf("verified against cpu-ref: %s: %s\n", vd.pass ? "ok" : "MISMATCH", vd.why);
        if (!vd.pass) rc = EXIT_CHECK;
        free(r);
    }
    free(d);
    fp4_matrix_free(&ma);
    fp4_matrix_free(&mb);
    /* after close: the tables and code live in the plugins */
    for (int i = 0; i < nplugins; i++) fp4_backend_unload(plugin_handles[i]);
    return rc;
}

int cmd_check(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench check"};
    operand oa = {NULL, NULL, "--a", ""}, ob = {NULL, NULL, "--b", ""};
    const char *pd = NULL, *v;
    double tol_max = 0.01, tol_norm = 0.005;
    fp4_matrix ma, mb;
    fp4_err err;
    float *d = NULL;
    int64_t rows, cols;
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(check_usage, stdout);
            return 0;
        } else if (operand_option(&a, &oa, &ob)) {
        } else if (cli_value(&a, "--d", &v)) {
            pd = v;
        } else if (cli_value(&a, "--tol-max", &v)) {
            tol_max = cli_double(&a, "--tol-max", v);
            if (tol_max < 0) cli_usage_error(&a, "--tol-max must be >= 0");
        } else if (cli_value(&a, "--tol-norm", &v)) {
            tol_norm = cli_double(&a, "--tol-norm", v);
            if (tol_norm < 0) cli_usage_error(&a, "--tol-norm must be >= 0");
        } else {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        }
    }
    if (!pd) cli_usage_error(&a, "--d is required");
    load_operands(&a, &oa, &ob, &ma, &mb);
    if (fp4_npy_read_matrix_f32(pd, &d, &rows, &cols, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (rows != ma.rows || cols != mb.rows) {
        fp4_fail(&err, FP4_ERR_DTYPE, "%s is [%lld, %lld], expected [%lld, %lld] (M from --a, N from --b)",
                 pd, (long long)rows, (long long)cols, (long long)ma.rows, (long long)mb.rows);
        cli_die(a.cmd, &err);
    }
    float *r = reference_of(&a, &ma, &mb);
    fp4_verdict vd;
    size_t n = (size_t)rows * (size_t)cols;
    fp4_compare_outputs(d, r, n, tol_max, tol_norm, &vd);
    printf("%s [%lld, %lld] vs exact reference: max|D-R|/max|R| = %.3g (tol %.3g), "
           "||D-R||/||R|| = %.3g (tol %.3g), NaN/Inf %lld, zeros %lld of %zu\n",
           pd, (long long)rows, (long long)cols, vd.err_max, tol_max, vd.err_norm, tol_norm,
           vd.nonfinite, vd.zeros_d, n);
    printf("%s%s%s\n", vd.pass ? "PASS" : "FAIL", vd.pass ? "" : ": ", vd.pass ? "" : vd.why);
    free(r);
    free(d);
    fp4_matrix_free(&ma);
    fp4_matrix_free(&mb);
    return vd.pass ? 0 : EXIT_CHECK;
}
