/* plot.c: CSV and SVG output: per-step logs, --diag's per-layer profiles, --compare's table
   and curves. Plain SVG written by hand: no plotting dependency. */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct series {
    const char* name;
    const char* color;
    int n;
    const double* x;
    const double* y;
    int dashed;
} series;

static const char* const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static double nice_step(double range) {
    const double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void svg_text(FILE* f, double x, double y, const char* anchor, int size, const char* s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor, size);
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
    fputs("</text>\n", f);
}

/* One panel of line plots at (px, py) of size (pw, ph). ycap > 0 clips values above it;
   int_x: integer x ticks (layer indices). */
static void svg_panel(FILE* f, double px, double py, double pw, double ph, const char* title,
                      const char* xlabel, const char* ylabel, const series* s, int ns, double ycap,
                      int int_x) {
    const double L = px + 60, R = px + pw - 10, Tp = py + 30, Bt = py + ph - 45;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, st, v;
    int i, k, any = 0;
    char buf[64];
    for (k = 0; k < ns; k++)
        for (i = 0; i < s[k].n; i++) {
            double y = s[k].y[i];
            if (!isfinite(y) || !isfinite(s[k].x[i])) continue;
            if (ycap > 0 && y > ycap) y = ycap;
            if (s[k].x[i] < xmin) xmin = s[k].x[i];
            if (s[k].x[i] > xmax) xmax = s[k].x[i];
            if (y < ymin) ymin = y;
            if (y > ymax) ymax = y;
            any = 1;
        }
    if (!any) { xmin = 0; xmax = 1; ymin = 0; ymax = 1; }
    if (xmax - xmin < 1e-12) { xmin -= 0.5; xmax += 0.5; }
    if (ymax - ymin < 1e-12) { ymin -= 0.5; ymax += 0.5; }
    {   /* a little headroom, rounded to ticks */
        const double ys = nice_step(ymax - ymin);
        ymin = floor(ymin / ys) * ys;
        ymax = ceil(ymax / ys) * ys;
    }
#define SX(x) (L + ((x) - xmin) / (xmax - xmin) * (R - L))
#define SY(y) (Bt - ((y) - ymin) / (ymax - ymin) * (Bt - Tp))
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" stroke=\"#888\"/>\n",
            L, Tp, R - L, Bt - Tp);
    svg_text(f, (L + R) / 2, py + 20, "middle", 15, title);
    svg_text(f, (L + R) / 2, Bt + 36, "middle", 12, xlabel);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
               "font-size=\"12\">%s</text>\n", px + 14, (Tp + Bt) / 2, ylabel);
    st = nice_step(xmax - xmin);
    if (int_x && st < 1) st = 1;
    for (v = ceil(xmin / st) * st; v <= xmax + 1e-9 * st; v += st) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", SX(v), Tp, SX(v), Bt);
        snprintf(buf, sizeof buf, "%g", fabs(v) < 1e-9 * st ? 0.0 : v);
        svg_text(f, SX(v), Bt + 16, "middle", 11, buf);
    }
    st = nice_step(ymax - ymin);
    for (v = ceil(ymin / st - 1e-9) * st; v <= ymax + 1e-9 * st; v += st) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", L, SY(v), R, SY(v));
        snprintf(buf, sizeof buf, "%g", fabs(v) < 1e-9 * st ? 0.0 : v);
        svg_text(f, L - 5, SY(v) + 4, "end", 11, buf);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            L, Tp, R - L, Bt - Tp);
    for (k = 0; k < ns; k++) {
        int open = 0;
        for (i = 0; i < s[k].n; i++) {
            double y = s[k].y[i];
            if (!isfinite(y) || !isfinite(s[k].x[i])) { /* break the line at NaN/Inf */
                if (open) fputs("\"/>\n", f);
                open = 0;
                continue;
            }
            if (ycap > 0 && y > ycap) y = ycap;
            if (!open) {
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"",
                        s[k].color, s[k].dashed ? " stroke-dasharray=\"6,4\"" : "");
                open = 1;
            }
            fprintf(f, "%.1f,%.1f ", SX(s[k].x[i]), SY(y));
        }
        if (open) fputs("\"/>\n", f);
        if (s[k].n == 1 && isfinite(s[k].y[0]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", SX(s[k].x[0]),
                    SY(s[k].y[0] > ycap && ycap > 0 ? ycap : s[k].y[0]), s[k].color);
    }
    for (k = 0; k < ns; k++) { /* legend, top right */
        const double ly = Tp + 14 + 16 * k, lx = R - 150;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"146\" height=\"16\" fill=\"white\" fill-opacity=\"0.8\"/>\n", lx - 4, ly - 11);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                lx, ly - 4, lx + 22, ly - 4, s[k].color, s[k].dashed ? " stroke-dasharray=\"6,4\"" : "");
        svg_text(f, lx + 28, ly, "start", 11, s[k].name);
    }
#undef SX
#undef SY
}

static FILE* svg_open(const char* dir, const char* name, double w, double h, char* path, size_t n) {
    FILE* f = open_in(dir, name, path, n);
    if (!f) return NULL;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
               "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h, w, h);
    return f;
}
static int svg_close(FILE* f, const char* path) {
    fputs("</svg>\n", f);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

int write_diag(const config* c, const model* m, const history* h, double unigram) {
    const int L = m->s.desc.n_layers;
    char path[1024];
    FILE* f;
    int i, l, k;
    if (make_dir(c->diag)) return 1;
    if (!(f = open_in(c->diag, "loss.csv", path, sizeof path))) return 1;
    fprintf(f, "step,train_loss\n");
    for (i = 0; i < h->n_steps; i++) fprintf(f, "%.0f,%.6g\n", h->step_x[i], h->loss[i]);
    fclose(f);
    if (!(f = open_in(c->diag, "eval.csv", path, sizeof path))) return 1;
    fprintf(f, "step,val_loss,grad_norm\n");
    for (i = 0; i < h->n_eval; i++) fprintf(f, "%.0f,%.6g,%.6g\n", h->eval_x[i], h->val[i], h->gnorm[i]);
    fclose(f);
    if (!(f = open_in(c->diag, "layer_grad_norms.csv", path, sizeof path))) return 1;
    fprintf(f, "step");
    for (l = 0; l < L; l++) fprintf(f, ",layer%d", l);
    fprintf(f, "\n");
    for (i = 0; i < h->n_diag; i++) {
        fprintf(f, "%.0f", h->diag_x[i]);
        for (l = 0; l < L; l++) fprintf(f, ",%.6g", h->grad_l[(size_t)i * L + l]);
        fprintf(f, "\n");
    }
    fclose(f);
    if (!(f = open_in(c->diag, "hidden_norms.csv", path, sizeof path))) return 1;
    fprintf(f, "step");
    for (l = 0; l <= L; l++) fprintf(f, ",x%d", l);
    fprintf(f, "\n");
    for (i = 0; i < h->n_diag; i++) {
        fprintf(f, "%.0f", h->diag_x[i]);
        for (l = 0; l <= L; l++) fprintf(f, ",%.6g", h->hid_l[(size_t)i * (L + 1) + l]);
        fprintf(f, "\n");
    }
    fclose(f);
    if (!(f = open_in(c->diag, "angular_distance.csv", path, sizeof path))) return 1;
    fprintf(f, "step");
    for (l = 0; l < L; l++) fprintf(f, ",d%d_%d", l, l + 1);
    fprintf(f, "\n");
    for (i = 0; i < h->n_diag; i++) {
        fprintf(f, "%.0f", h->diag_x[i]);
        for (l = 0; l < L; l++) fprintf(f, ",%.6g", h->ang_l[(size_t)i * L + l]);
        fprintf(f, "\n");
    }
    fclose(f);
    {   /* loss.svg: train loss per step, validation loss, unigram baseline */
        double bx[2], by[2];
        series s[3];
        double cap = 0;
        bx[0] = 0; bx[1] = h->n_steps ? h->step_x[h->n_steps - 1] : 1; by[0] = by[1] = unigram;
        s[0].name = "train"; s[0].color = "#9ecae1"; s[0].n = h->n_steps; s[0].x = h->step_x; s[0].y = h->loss; s[0].dashed = 0;
        s[1].name = "validation"; s[1].color = "#d62728"; s[1].n = h->n_eval; s[1].x = h->eval_x; s[1].y = h->val; s[1].dashed = 0;
        s[2].name = "unigram baseline"; s[2].color = "#555"; s[2].n = 2; s[2].x = bx; s[2].y = by; s[2].dashed = 1;
        for (i = 0; i < h->n_steps && i < 5; i++) if (isfinite(h->loss[i]) && h->loss[i] > cap) cap = h->loss[i];
        if (!(f = svg_open(c->diag, "loss.svg", 720, 420, path, sizeof path))) return 1;
        svg_panel(f, 0, 0, 720, 420, "Loss", "step", "cross-entropy (nats)", s, 3, cap * 1.05, 0);
        if (svg_close(f, path)) return 1;
    }
    if (h->n_diag > 0) {   /* layers.svg: per-layer profiles at up to 4 points of training */
        static const char* const shades[] = {"#c6dbef", "#6baed6", "#2171b5", "#08306b"};
        double lx[MAX_LAYERS + 1];
        series sg[4], sh[4], sa[4];
        char names[4][32];
        int pick[4], np = h->n_diag < 4 ? h->n_diag : 4;
        for (l = 0; l <= L; l++) lx[l] = l;
        for (k = 0; k < np; k++) {
            pick[k] = np == 1 ? 0 : (int)((double)k * (h->n_diag - 1) / (np - 1) + 0.5);
            snprintf(names[k], sizeof names[k], "step %.0f", h->diag_x[pick[k]]);
            sg[k].name = sh[k].name = sa[k].name = names[k];
            sg[k].color = sh[k].color = sa[k].color = shades[4 - np + k];
            sg[k].dashed = sh[k].dashed = sa[k].dashed = 0;
            sg[k].x = sh[k].x = sa[k].x = lx;
            sg[k].n = L; sg[k].y = h->grad_l + (size_t)pick[k] * L;
            sh[k].n = L + 1; sh[k].y = h->hid_l + (size_t)pick[k] * (L + 1);
            sa[k].n = L; sa[k].y = h->ang_l + (size_t)pick[k] * L;
        }
        if (!(f = svg_open(c->diag, "layers.svg", 1260, 400, path, sizeof path))) return 1;
        svg_panel(f, 0, 0, 420, 400, "Gradient norm per layer", "layer l", "||grad of block l||", sg, np, 0, 1);
        svg_panel(f, 420, 0, 420, 400, "Hidden-state magnitude", "l (input of block l; L = output)", "mean ||x_l||", sh, np, 0, 1);
        svg_panel(f, 840, 0, 420, 400, "Angular distance d(l, l+1)", "layer l", "arccos(cos(x_l, x_l+1)) / pi", sa, np, 0, 1);
        if (svg_close(f, path)) return 1;
    }
    return 0;
}


/* every training step: loss, global gradient norm (before clipping), learning rate */
int write_steps_csv(const char* path, const history* h) {
    FILE* f = fopen(path, "w");
    int i;
    if (!f) return fail("cannot write %s", path);
    fprintf(f, "step,loss,grad_norm,lr\n");
    for (i = 0; i < h->n_steps; i++)
        fprintf(f, "%.0f,%.9g,%.9g,%.9g\n", h->step_x[i], h->loss[i], h->step_gnorm[i], h->step_lr[i]);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

/* compare.csv (one row per preset) and compare.svg (train and validation curves) */
int write_compare(const char* dir, const char* const* names, const history* hs, int n,
                  double unigram, int steps, int text) {
    series s[2 * MAX_COMPARE + 1];
    double bx[2], by[2], cap = 0;
    char lab[MAX_COMPARE][80], vlab[MAX_COMPARE][80], path[1024];
    FILE* f;
    int i, k = 0, rc = 0;
    (void)text;
    if (make_dir(dir)) return 1;
    bx[0] = 0; bx[1] = steps; by[0] = by[1] = unigram;
    if ((f = open_in(dir, "compare.csv", path, sizeof path))) {
        fprintf(f, "preset,final_loss,val_loss,accuracy,diverged_at\n");
        for (i = 0; i < n; i++)
            fprintf(f, "%s,%.6g,%.6g,%.4g,%d\n", names[i], hs[i].final_loss, hs[i].final_val,
                    hs[i].accuracy, hs[i].diverged_at);
        if (ferror(f) | fclose(f)) rc = fail("writing %s failed", path);
    } else rc = 1;
    for (i = 0; i < n; i++) {
        const char* col = k_colors[i % 10];
        snprintf(lab[i], sizeof lab[i], "%s train", names[i]);
        snprintf(vlab[i], sizeof vlab[i], "%s val", names[i]);
        s[k].name = lab[i]; s[k].color = col; s[k].n = hs[i].n_steps; s[k].x = hs[i].step_x;
        s[k].y = hs[i].loss; s[k].dashed = 0; k++;
        s[k].name = vlab[i]; s[k].color = col; s[k].n = hs[i].n_eval; s[k].x = hs[i].eval_x;
        s[k].y = hs[i].val; s[k].dashed = 1; k++;
        if (hs[i].n_steps && isfinite(hs[i].loss[0]) && hs[i].loss[0] > cap) cap = hs[i].loss[0];
    }
    s[k].name = "unigram baseline"; s[k].color = "#555"; s[k].n = 2; s[k].x = bx; s[k].y = by;
    s[k].dashed = 1; k++;
    if ((f = svg_open(dir, "compare.svg", 900, 520, path, sizeof path))) {
        svg_panel(f, 0, 0, 900, 520, "Loss by normalization placement (same seed and data)",
                  "step", "cross-entropy (nats)", s, k, cap * 1.05, 0);
        if (svg_close(f, path)) rc = 1;
        else if (!rc) printf("comparison plot: %s (table: %s/compare.csv)\n", path, dir);
    } else rc = 1;
    return rc;
}
