/* summary.c: a run's results as JSON (--summary, and each run of a sweep): written by the run,
   read back by the sweep (sweep.c), so that a sweep run again reuses what is finished. */
#include "train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static cJSON* number_array(const double* x, int n) {
    cJSON* a = cJSON_CreateArray();
    int i;
    for (i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i])); /* NaN -> null */
    return a;
}

int write_summary(const char* path, const config* c, const history* h, double unigram) {
    cJSON* o = cJSON_CreateObject();
    char* json;
    FILE* f;
    char seed[32];
    int rc = 0;
    snprintf(seed, sizeof seed, "%llu", c->loop.seed);
    cJSON_AddStringToObject(o, "preset", c->model.schedule[0] ? "custom" : c->model.preset);
    cJSON_AddStringToObject(o, "seed", seed); /* a string: seeds go beyond 2^53 */
    cJSON_AddNumberToObject(o, "lr", c->optim.lr);
    cJSON_AddStringToObject(o, "init", h->init);
    cJSON_AddNumberToObject(o, "steps", c->loop.steps);
    cJSON_AddNumberToObject(o, "steps_done", h->steps_done);
    cJSON_AddNumberToObject(o, "final_loss", h->final_loss);
    cJSON_AddNumberToObject(o, "final_val", h->final_val);
    cJSON_AddNumberToObject(o, "accuracy", h->accuracy);
    cJSON_AddNumberToObject(o, "n_problems", h->n_problems);
    cJSON_AddNumberToObject(o, "diverged_at", h->diverged_at);
    cJSON_AddNumberToObject(o, "spikes", h->spikes);
    cJSON_AddNumberToObject(o, "worst_spike", h->worst_spike);
    if (h->hc_logged) { /* hyper-connections: the composite Amax gains (run.c) */
        cJSON_AddNumberToObject(o, "hc_fwd_gain", h->hc_fwd);
        cJSON_AddNumberToObject(o, "hc_bwd_gain", h->hc_bwd);
        cJSON_AddNumberToObject(o, "hc_fwd_gain_peak", h->hc_fwd_peak);
        cJSON_AddNumberToObject(o, "hc_bwd_gain_peak", h->hc_bwd_peak);
    }
    if (h->ar_logged) attnres_json(h, o); /* Attention Residuals' depth weights (attnres.c) */
    if (h->unet) unet_json(h, o);         /* the U-Net's and re-injection's scalars (unet.c) */
    /* attention (heads.c): the largest logit of the last step's forward and of any step, the
       first-key mass (mean over layers and heads) at the last logged step, QK-Clip's head clips,
       the sinks' mass (NaN without sinks) */
    cJSON_AddNumberToObject(o, "max_logit", h->max_logit);
    cJSON_AddNumberToObject(o, "max_logit_peak", h->max_logit_peak);
    cJSON_AddNumberToObject(o, "first_mass", h->first_mass);
    cJSON_AddNumberToObject(o, "qk_clips", (double)h->clips);
    cJSON_AddNumberToObject(o, "sink_mass", h->sink_mass);
    cJSON_AddNumberToObject(o, "interrupted", h->interrupted);
    cJSON_AddNumberToObject(o, "unigram", unigram);
    cJSON_AddNumberToObject(o, "train_seconds", h->train_seconds);
    cJSON_AddNumberToObject(o, "seconds", h->seconds);
    cJSON_AddNumberToObject(o, "tokens", h->tokens);
    cJSON_AddItemToObject(o, "eval_steps", number_array(h->eval_x, h->n_eval));
    cJSON_AddItemToObject(o, "val", number_array(h->val, h->n_eval));
    json = cJSON_Print(o);
    cJSON_Delete(o);
    if (!json) return fail("%s: cannot build the summary", path);
    if (!(f = create_out(path))) rc = 1;
    else {
        fprintf(f, "%s\n", json);
        if (close_out(f)) rc = 1;
    }
    free(json);
    return rc;
}
