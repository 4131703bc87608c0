/* fp4bench run --gpus on the GPUs of this machine: every GPU at once
 * (fp4_pergpu_run), a small shape on cublas-bf16 and fp4-sm90 where it runs.
 * Checks: one row per GPU and backend, each carrying its GPU's number, each
 * verified against the exact reference and timed; every GPU's header (its
 * own PCI bus id, its own L2 and clocks) as that device reports them, so the
 * engine of each thread used its own device; rows called back one at a
 * time; and the comparison over the result. Exit 77 without a GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "fp4/backend.h"
#include "fp4/engine.h"
#include "fp4/report.h"
#include "multigpu/pergpu.h"

typedef struct seen {
    int rows, ready;
} seen;

static int on_ready(fp4_report *r, void *user)
{
    seen *s = user;
    s->ready++;
    CHECK(r->ngpus > 0);
    return 0;
}

static void on_row(const fp4_report *r, const fp4_row *row, void *user)
{
    seen *s = user;
    s->rows++;
    CHECK(r->nrows == s->rows); /* appended, then called back, one at a time */
    CHECK(&r->rows[r->nrows - 1] == row);
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_gpus: skipped: no CUDA device\n");
        return 77;
    }
    fp4_gpu_list gpus;
    fp4_err err;
    CHECK(fp4_gpu_list_parse("all", &gpus, &err) == FP4_OK);
    CHECK(fp4_gpu_list_resolve(&gpus, count > FP4_MAX_GPUS ? FP4_MAX_GPUS : count, &err) == FP4_OK);

    fp4_settings set;
    fp4_settings_default(&set);
    set.warmup_ms = 20;
    set.stop.max_time_s = 1;
    set.stop.min_samples = 5;
    fp4_case c;
    memset(&c, 0, sizeof c);
    c.shape = (fp4_shape){128, 256, 512};
    snprintf(c.label, sizeof c.label, "gpus");
    const fp4_backend_ops *backends[2];
    int nb = 0;
    backends[nb++] = fp4_backend_find("cublas-bf16");
    if (fp4_backend_find("fp4-sm90")) backends[nb++] = fp4_backend_find("fp4-sm90");
    CHECK(backends[0] != NULL);
    if (!backends[0]) return check_finish("gpu_gpus");

    seen s = {0, 0};
    fp4_report report;
    fp4_warnings warn;
    memset(&report, 0, sizeof report);
    fp4_warnings_clear(&warn);
    const fp4_pergpu_job job = {&set, 0, &c, 1, backends, nb, &gpus, on_ready, on_row, &s};
    fp4_status st = fp4_pergpu_run(&job, &report, &warn, &err);
    CHECK_MSG(st == FP4_OK, "%s", fp4_err_text(&err));
    CHECK(s.ready == 1);
    CHECK_MSG(report.ngpus == gpus.n, "%d GPUs in the report, %d listed", report.ngpus, gpus.n);
    CHECK_MSG(report.nrows == gpus.n * nb, "%d rows for %d GPUs x %d backends", report.nrows, gpus.n, nb);
    CHECK(s.rows == report.nrows);

    for (int i = 0; i < report.ngpus && i < gpus.n; i++) {
        const fp4_device_info *d = &report.gpus[i].dev;
        const fp4_device_extra *x = &report.gpus[i].x;
        char bus[32] = "";
        int l2 = 0;
        CHECK(d->present && x->index == gpus.index[i]);
        CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, gpus.index[i]) == cudaSuccess);
        CHECK_MSG(strcmp(x->pci_bus_id, bus) == 0, "GPU %d: header says %s, CUDA %s", gpus.index[i],
                  x->pci_bus_id, bus);
        CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, gpus.index[i]) == cudaSuccess);
        CHECK(d->l2_bytes == (double)l2);
        for (int j = 0; j < i; j++) CHECK(strcmp(report.gpus[j].x.pci_bus_id, x->pci_bus_id) != 0);
        /* one row per backend on this GPU, verified and timed there */
        for (int b = 0; b < nb; b++) {
            int found = 0;
            for (int k = 0; k < report.nrows; k++) {
                const fp4_row *w = &report.rows[k];
                if (w->gpu != gpus.index[i] || strcmp(w->backend, backends[b]->name) != 0) continue;
                found++;
                if (w->state == FP4_ROW_UNSUPPORTED) continue; /* fp4-sm90 off sm_90 */
                CHECK_MSG(w->state == FP4_ROW_OK, "GPU %d %s: %s", w->gpu, w->backend, w->reason);
                CHECK_MSG(w->verified == 1, "GPU %d %s: not verified (%s)", w->gpu, w->backend,
                          w->verify_note);
                CHECK(w->verified_copies >= 1);
                CHECK(w->t.count > 0 && isfinite(w->t.median) && w->t.median > 0);
            }
            CHECK_MSG(found == 1, "GPU %d %s: %d rows", gpus.index[i], backends[b]->name, found);
        }
    }

    fp4_gpu_analysis an;
    CHECK(fp4_gpu_analyze(&report, &an, &err) == FP4_OK);
    CHECK(an.ngpus == gpus.n && an.ngroups == nb);
    if (an.ngroups > 0) CHECK(an.groups[0].rows == gpus.n);
    fp4_gpu_analysis_free(&an);
    fp4_report_print_header(stdout, &report);
    fp4_report_print_table(stdout, &report);
    if (warn.count) printf("warnings:\n%s", warn.text);
    fp4_report_free(&report);
    return check_finish("gpu_gpus");
}
