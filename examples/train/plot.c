/* plot.c: CSV and SVG output: per-step logs, --diag's per-layer profiles, a sweep's curves and
   learning-rate plot. Plain SVG written by hand: no plotting dependency. Legends sit beside
   the panels, never over the data; losses that span more than a decade get a log axis, so the
   end of training (where presets differ) is as readable as the start. */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct line {
    const char* name;
    const char* color;
    int n;
    const double *x, *y;
    const double *lo, *hi;    /* optional: a band (or error bars) around y */
    const int* mark;          /* optional: mark[i] 1 draws a cross at the top (diverged), 2 a
                                 ring around the point (collapsed) */
    int mark_row, mark_rows;  /* crosses of line k of mark_rows sit side by side at the top, so
                                 lines do not hide each other and none looks like a value */
    int dashed, dots, bars;   /* dashed line; circles at the points; lo/hi as error bars */
} line;

typedef struct panel {
    double x, y, w, h;        /* the panel's box in the SVG, legend not included */
    const char *title, *xlabel, *ylabel;
    int logx, logy, int_x;
    double ymax;              /* > 0: values above are drawn at ymax (early transients) */
} panel;

/* tab10, then greys: presets */
static const char* const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
/* ordered and distinct (plasma): snapshots of training */
static const char* const k_time_colors[] = {"#0d0887", "#9c179e", "#e16462", "#fca636"};

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

/* ---- axes ---- */

typedef struct axes {
    double L, R, Tp, Bt;          /* the data area */
    double x0, x1, y0, y1;        /* its range, in log10 units on a log axis */
    int logx, logy;
    double ymax;
} axes;

static double ax_x(const axes* a, double v) {
    const double t = a->logx ? log10(v) : v;
    return a->L + (t - a->x0) / (a->x1 - a->x0) * (a->R - a->L);
}
static double clip_y(const axes* a, double v) { return a->ymax > 0 && v > a->ymax ? a->ymax : v; }
static double ax_y(const axes* a, double v) {
    const double c = clip_y(a, v), t = a->logy ? log10(c) : c;
    return a->Bt - (t - a->y0) / (a->y1 - a->y0) * (a->Bt - a->Tp);
}
static int usable(const axes* a, double x, double y) {
    return isfinite(x) && isfinite(y) && (!a->logx || x > 0) && (!a->logy || y > 0);
}

/* the range of every finite point (and band) of the lines, with headroom */
static void fit(axes* a, const line* s, int ns) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int i, k, j;
    for (k = 0; k < ns; k++)
        for (i = 0; i < s[k].n; i++)
            for (j = 0; j < 3; j++) {
                const double* src = j == 0 ? s[k].y : j == 1 ? s[k].lo : s[k].hi;
                double x = s[k].x[i], y;
                if (!src) continue;
                y = clip_y(a, src[i]);
                if (!usable(a, x, y)) continue;
                if (a->logx) x = log10(x);
                if (a->logy) y = log10(y);
                if (x < xmin) xmin = x;
                if (x > xmax) xmax = x;
                if (y < ymin) ymin = y;
                if (y > ymax) ymax = y;
            }
    if (xmin > xmax) { xmin = 0; xmax = 1; ymin = 0; ymax = 1; }
    if (xmax - xmin < 1e-12) { xmin -= 0.5; xmax += 0.5; }
    if (ymax - ymin < 1e-12) { ymin -= 0.5; ymax += 0.5; }
    if (a->logx) { xmin -= 0.08 * (xmax - xmin); xmax += 0.08 * (xmax - xmin); }
    if (a->logy) { ymin = floor(ymin * 10) / 10; ymax = ceil(ymax * 10) / 10; }
    else {
        const double ys = nice_step(ymax - ymin);
        ymin = floor(ymin / ys) * ys;
        ymax = ceil(ymax / ys) * ys;
    }
    a->x0 = xmin; a->x1 = xmax; a->y0 = ymin; a->y1 = ymax;
}

static void grid_line(FILE* f, double x1, double y1, double x2, double y2) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", x1, y1, x2, y2);
}

/* ticks of a log axis from lo to hi (log10 units): 1-2-5 per decade when few decades show */
static void log_ticks(FILE* f, const axes* a, int vertical) {
    const double lo = vertical ? a->y0 : a->x0, hi = vertical ? a->y1 : a->x1;
    static const double mult[3] = {1, 2, 5};
    const int every = hi - lo > 3 ? 1 : 3;
    int e, m;
    char buf[32];
    for (e = (int)floor(lo); e <= (int)ceil(hi); e++)
        for (m = 0; m < every; m++) {
            const double v = mult[m] * pow(10, e), t = log10(v);
            if (t < lo - 1e-9 || t > hi + 1e-9) continue;
            snprintf(buf, sizeof buf, "%g", v);
            if (vertical) {
                const double y = ax_y(a, v);
                grid_line(f, a->L, y, a->R, y);
                svg_text(f, a->L - 5, y + 4, "end", 11, buf);
            } else {
                const double x = ax_x(a, v);
                grid_line(f, x, a->Tp, x, a->Bt);
                svg_text(f, x, a->Bt + 16, "middle", 11, buf);
            }
        }
}

static void lin_ticks(FILE* f, const axes* a, int vertical, int int_x) {
    const double lo = vertical ? a->y0 : a->x0, hi = vertical ? a->y1 : a->x1;
    double st = nice_step(hi - lo), v;
    char buf[32];
    if (!vertical && int_x && st < 1) st = 1;
    for (v = ceil(lo / st - 1e-9) * st; v <= hi + 1e-9 * st; v += st) {
        snprintf(buf, sizeof buf, "%g", fabs(v) < 1e-9 * st ? 0.0 : v);
        if (vertical) {
            grid_line(f, a->L, ax_y(a, v), a->R, ax_y(a, v));
            svg_text(f, a->L - 5, ax_y(a, v) + 4, "end", 11, buf);
        } else {
            grid_line(f, ax_x(a, v), a->Tp, ax_x(a, v), a->Bt);
            svg_text(f, ax_x(a, v), a->Bt + 16, "middle", 11, buf);
        }
    }
}

/* ---- drawing ---- */

static void draw_band(FILE* f, const axes* a, const line* s) {
    int i = 0;
    while (i < s->n) { /* one polygon per run of points with a finite band */
        int j = i, k;
        while (j < s->n && usable(a, s->x[j], s->lo[j]) && usable(a, s->x[j], s->hi[j])) j++;
        if (j - i >= 2) {
            fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" points=\"", s->color);
            for (k = i; k < j; k++) fprintf(f, "%.1f,%.1f ", ax_x(a, s->x[k]), ax_y(a, s->hi[k]));
            for (k = j - 1; k >= i; k--) fprintf(f, "%.1f,%.1f ", ax_x(a, s->x[k]), ax_y(a, s->lo[k]));
            fputs("\"/>\n", f);
        }
        i = j + 1;
    }
}

static void draw_line(FILE* f, const axes* a, const line* s) {
    int i, open = 0;
    if (s->lo && s->hi && !s->bars) draw_band(f, a, s);
    for (i = 0; i < s->n; i++) {
        if (!usable(a, s->x[i], s->y[i])) { /* break the line at NaN/Inf */
            if (open) fputs("\"/>\n", f);
            open = 0;
            continue;
        }
        if (!open) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s points=\"",
                    s->color, s->dashed ? " stroke-dasharray=\"6,4\"" : "");
            open = 1;
        }
        fprintf(f, "%.1f,%.1f ", ax_x(a, s->x[i]), ax_y(a, s->y[i]));
    }
    if (open) fputs("\"/>\n", f);
    for (i = 0; i < s->n; i++) {
        const double x = ax_x(a, s->x[i]);
        if (s->mark && s->mark[i] == 1 && isfinite(s->x[i])) { /* a cross at the top: diverged */
            const double y = a->Tp + 8, cx = x + 11 * (s->mark_row - 0.5 * (s->mark_rows - 1));
            fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"2.2\"/>\n",
                    cx - 5, y - 5, cx + 5, y + 5, cx - 5, y + 5, cx + 5, y - 5, s->color);
            continue;
        }
        if (!usable(a, s->x[i], s->y[i])) continue;
        if (s->bars && s->lo && s->hi && usable(a, s->x[i], s->lo[i]) && usable(a, s->x[i], s->hi[i]))
            fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"%s\" stroke-width=\"1.4\"/>\n",
                    x, ax_y(a, s->lo[i]), ax_y(a, s->hi[i]), x - 4, ax_y(a, s->lo[i]), x + 4,
                    x - 4, ax_y(a, s->hi[i]), x + 4, s->color);
        if (s->dots || s->n == 1)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\" fill=\"%s\"/>\n", x, ax_y(a, s->y[i]), s->color);
        if (s->mark && s->mark[i] == 2)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"7\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                    x, ax_y(a, s->y[i]), s->color);
    }
}

/* One panel: frame, ticks, labels, lines. */
static void draw_panel(FILE* f, const panel* p, const line* s, int ns) {
    axes a;
    int k;
    memset(&a, 0, sizeof a);
    a.L = p->x + 64; a.R = p->x + p->w - 12; a.Tp = p->y + 34; a.Bt = p->y + p->h - 46;
    a.logx = p->logx; a.logy = p->logy; a.ymax = p->ymax;
    fit(&a, s, ns);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\"/>\n",
            a.L, a.Tp, a.R - a.L, a.Bt - a.Tp);
    svg_text(f, (a.L + a.R) / 2, p->y + 20, "middle", 14, p->title);
    svg_text(f, (a.L + a.R) / 2, a.Bt + 36, "middle", 12, p->xlabel);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
               "font-size=\"12\">%s</text>\n", p->x + 14, (a.Tp + a.Bt) / 2, p->ylabel);
    if (a.logx) log_ticks(f, &a, 0); else lin_ticks(f, &a, 0, p->int_x);
    if (a.logy) log_ticks(f, &a, 1); else lin_ticks(f, &a, 1, 0);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            a.L, a.Tp, a.R - a.L, a.Bt - a.Tp);
    for (k = 0; k < ns; k++) draw_line(f, &a, &s[k]);
}

/* the legend in its own column at (x, y), one entry per line (name NULL: none) */
static void draw_legend(FILE* f, double x, double y, const line* s, int ns) {
    int k, row = 0;
    for (k = 0; k < ns; k++) {
        const double ly = y + 18 * row;
        if (!s[k].name) continue;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.4\"%s/>\n",
                x, ly - 4, x + 24, ly - 4, s[k].color, s[k].dashed ? " stroke-dasharray=\"6,4\"" : "");
        if (s[k].lo && !s[k].bars)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"24\" height=\"10\" fill=\"%s\" fill-opacity=\"0.18\"/>\n",
                    x, ly - 9, s[k].color);
        svg_text(f, x + 30, ly, "start", 12, s[k].name);
        row++;
    }
}

static FILE* svg_open(const char* path, double w, double h) {
    FILE* f = create_out(path);
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

/* a log y axis when the positive values span more than a factor of 20 (a loss going to 0.01
   on a linear axis hides everything after the first drop) */
static int wants_log(const line* s, int ns, double ymax) {
    double lo = INFINITY, hi = 0;
    int k, i;
    for (k = 0; k < ns; k++)
        for (i = 0; i < s[k].n; i++) {
            double y = s[k].y[i];
            if (!isfinite(y)) continue;
            if (y <= 0) return 0;
            if (ymax > 0 && y > ymax) y = ymax;
            if (y < lo) lo = y;
            if (y > hi) hi = y;
        }
    return hi > 20 * lo;
}

/* ---- --diag ---- */

/* column names: layer0.., x0.. (hidden states), d0_1.. (adjacent angular distance); the
   second stream (SiameseNorm's y) repeats them prefixed with y */
enum { COL_LAYER, COL_HIDDEN, COL_ANGLE };
static void col_name(FILE* f, int kind, int stream, int l) {
    if (kind == COL_LAYER) fprintf(f, ",layer%d", l);
    else if (kind == COL_HIDDEN) fprintf(f, ",%c%d", stream ? 'y' : 'x', l);
    else fprintf(f, ",%sd%d_%d", stream ? "y" : "", l, l + 1);
}

/* rows x (streams x cols) values, row i at v + i * streams * cols */
static int csv_rows(const char* dir, const char* name, int kind, int cols, int streams, int rows,
                    const double* x, const double* v) {
    char path[1024];
    FILE* f = open_in(dir, name, path, sizeof path);
    int i, l, s;
    if (!f) return 1;
    fprintf(f, "step");
    for (s = 0; s < streams; s++)
        for (l = 0; l < cols; l++) col_name(f, kind, s, l);
    fprintf(f, "\n");
    for (i = 0; i < rows; i++) {
        fprintf(f, "%.0f", x[i]);
        for (l = 0; l < streams * cols; l++) fprintf(f, ",%.6g", v[(size_t)i * streams * cols + l]);
        fprintf(f, "\n");
    }
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

static int diag_csvs(const config* c, int L, const history* h) {
    const int S = h->streams;
    char path[1024];
    FILE* f;
    int i;
    if (!(f = open_in(c->diag, "loss.csv", path, sizeof path))) return 1;
    fprintf(f, "step,loss,grad_norm,lr\n"); /* every step */
    for (i = 0; i < h->n_steps; i++)
        fprintf(f, "%.0f,%.6g,%.6g,%.6g\n", h->step_x[i], h->loss[i], h->step_gnorm[i], h->step_lr[i]);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    if (!(f = open_in(c->diag, "eval.csv", path, sizeof path))) return 1;
    fprintf(f, "step,val_loss,grad_norm\n");
    for (i = 0; i < h->n_eval; i++) fprintf(f, "%.0f,%.6g,%.6g\n", h->eval_x[i], h->val[i], h->gnorm[i]);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    /* SiameseNorm: stream x columns, then stream y columns (prefixed y) */
    return csv_rows(c->diag, "layer_grad_norms.csv", COL_LAYER, L, 1, h->n_diag, h->diag_x, h->grad_l) ||
           csv_rows(c->diag, "hidden_norms.csv", COL_HIDDEN, L + 1, S, h->n_diag, h->diag_x, h->hid_l) ||
           csv_rows(c->diag, "angular_distance.csv", COL_ANGLE, L, S, h->n_diag, h->diag_x, h->ang_l);
}

static int diag_loss_svg(const config* c, const history* h, double unigram) {
    double bx[2], by[2], cap = 0;
    char path[1024];
    line s[3];
    panel p;
    FILE* f;
    int i;
    memset(s, 0, sizeof s);
    memset(&p, 0, sizeof p);
    bx[0] = h->n_steps ? h->step_x[0] : 0; bx[1] = h->n_steps ? h->step_x[h->n_steps - 1] : 1;
    by[0] = by[1] = unigram;
    s[0].name = "train (every step)"; s[0].color = "#9ecae1"; s[0].n = h->n_steps; s[0].x = h->step_x; s[0].y = h->loss;
    s[1].name = "validation"; s[1].color = "#d62728"; s[1].n = h->n_eval; s[1].x = h->eval_x; s[1].y = h->val; s[1].dots = 1;
    s[2].name = "unigram baseline"; s[2].color = "#555"; s[2].n = 2; s[2].x = bx; s[2].y = by; s[2].dashed = 1;
    for (i = 0; i < h->n_steps && i < 5; i++) if (isfinite(h->loss[i]) && h->loss[i] > cap) cap = h->loss[i];
    p.w = 720; p.h = 420; p.title = "Loss"; p.xlabel = "step"; p.ylabel = "cross-entropy (nats)";
    p.ymax = cap * 1.05;
    p.logy = wants_log(s, 2, p.ymax);
    snprintf(path, sizeof path, "%s/loss.svg", c->diag);
    if (!(f = svg_open(path, 900, 420))) return 1;
    draw_panel(f, &p, s, 3);
    draw_legend(f, 726, 60, s, 3);
    return svg_close(f, path);
}

/* layers.svg: per-layer profiles at up to 4 points of training (one colour each); for
   SiameseNorm the hidden-state and angular panels have stream x solid and stream y dashed */
static int diag_layers_svg(const config* c, int L, const history* h) {
    const int S = h->streams, np = h->n_diag < 4 ? h->n_diag : 4;
    double lx[MAX_LAYERS + 1];
    line sg[4], sh[8], sa[8], key[10];
    char names[4][32], path[1024];
    panel p;
    FILE* f;
    int k, l, st, nk = 0;
    memset(sg, 0, sizeof sg); memset(sh, 0, sizeof sh); memset(sa, 0, sizeof sa); memset(key, 0, sizeof key);
    for (l = 0; l <= L; l++) lx[l] = l;
    for (k = 0; k < np; k++) {
        const int pick = np == 1 ? 0 : (int)((double)k * (h->n_diag - 1) / (np - 1) + 0.5);
        snprintf(names[k], sizeof names[k], "step %.0f", h->diag_x[pick]);
        sg[k].color = k_time_colors[4 - np + k];
        sg[k].x = lx; sg[k].n = L; sg[k].y = h->grad_l + (size_t)pick * L; sg[k].dots = 1;
        for (st = 0; st < S; st++) {
            line* a = &sh[k * S + st];
            line* b = &sa[k * S + st];
            *a = *b = sg[k];
            a->dashed = b->dashed = st == 1;
            a->n = L + 1; a->y = h->hid_l + ((size_t)pick * S + st) * (L + 1);
            b->y = h->ang_l + ((size_t)pick * S + st) * L;
        }
        key[nk] = sg[k];
        key[nk++].name = names[k];
    }
    if (S == 2) { /* the line styles of the two streams */
        key[nk].name = "stream x (HybridNorm)"; key[nk++].color = "#555";
        key[nk].name = "stream y (Pre-Norm)"; key[nk].color = "#555"; key[nk++].dashed = 1;
    }
    snprintf(path, sizeof path, "%s/layers.svg", c->diag);
    if (!(f = svg_open(path, 1440, 400))) return 1;
    memset(&p, 0, sizeof p);
    p.w = 420; p.h = 400; p.int_x = 1;
    p.title = "Gradient norm per layer"; p.xlabel = "layer l"; p.ylabel = "||grad of block l||";
    draw_panel(f, &p, sg, np);
    p.x = 420; p.title = "Hidden-state magnitude"; p.xlabel = "l (input of block l; L = output)";
    p.ylabel = "mean ||x_l||";
    draw_panel(f, &p, sh, np * S);
    p.x = 840; p.title = "Angular distance d(l, l+1)"; p.xlabel = "layer l";
    p.ylabel = "arccos(cos(x_l, x_l+1)) / pi";
    draw_panel(f, &p, sa, np * S);
    draw_legend(f, 1268, 60, key, nk);
    return svg_close(f, path);
}

int write_diag(const config* c, const model* m, const history* h, double unigram) {
    const int L = m->s.desc.n_layers;
    if (make_dir(c->diag) || diag_csvs(c, L, h) || diag_loss_svg(c, h, unigram)) return 1;
    return h->n_diag > 0 ? diag_layers_svg(c, L, h) : 0;
}

/* every training step: loss, global gradient norm (before clipping), learning rate */
int write_steps_csv(const char* path, const history* h) {
    FILE* f = create_out(path);
    int i;
    if (!f) return 1;
    fprintf(f, "step,loss,grad_norm,lr\n");
    for (i = 0; i < h->n_steps; i++)
        fprintf(f, "%.0f,%.9g,%.9g,%.9g\n", h->step_x[i], h->loss[i], h->step_gnorm[i], h->step_lr[i]);
    if (ferror(f) | fclose(f)) return fail("writing %s failed", path);
    return 0;
}

/* ---- sweeps ---- */

static void band_lines(const band* b, int n, line* s) {
    int k;
    memset(s, 0, (size_t)n * sizeof *s);
    for (k = 0; k < n; k++) {
        s[k].name = b[k].name; s[k].color = k_colors[k % 10]; s[k].n = b[k].n;
        s[k].x = b[k].x; s[k].y = b[k].y; s[k].lo = b[k].lo; s[k].hi = b[k].hi; s[k].mark = b[k].mark;
        s[k].mark_row = k;
        s[k].mark_rows = n;
    }
}

int plot_compare(const char* path, const char* title, const char* train_title, const band* val,
                 const band* train, int n, double unigram) {
    line sv[MAX_COMPARE + 1], st[MAX_COMPARE + 1];
    double bx[2] = {INFINITY, -INFINITY}, by[2], cap = 0;
    panel p;
    FILE* f;
    int k, i;
    band_lines(val, n, sv);
    band_lines(train, n, st);
    for (k = 0; k < n; k++) {
        for (i = 0; i < train[k].n; i++) {
            if (train[k].x[i] < bx[0]) bx[0] = train[k].x[i];
            if (train[k].x[i] > bx[1]) bx[1] = train[k].x[i];
        }
        sv[k].dots = 1;
        st[k].name = NULL;
        /* the train panel starts after the first 5% of steps: the drop from ln 256 would
           squeeze everything else */
        for (i = train[k].n / 20; i < train[k].n; i++)
            if (isfinite(train[k].y[i]) && train[k].y[i] > cap) cap = train[k].y[i];
    }
    if (!(bx[0] < bx[1])) { bx[0] = 0; bx[1] = 1; }
    by[0] = by[1] = unigram;
    memset(&sv[n], 0, sizeof sv[n]);
    sv[n].name = "unigram baseline"; sv[n].color = "#555"; sv[n].n = 2; sv[n].x = bx; sv[n].y = by; sv[n].dashed = 1;
    st[n] = sv[n];
    if (!(f = svg_open(path, 1200, 470))) return 1;
    memset(&p, 0, sizeof p);
    p.w = 510; p.h = 470; p.title = title; p.xlabel = "step"; p.ylabel = "validation loss (nats)";
    p.logy = wants_log(sv, n, 0);
    draw_panel(f, &p, sv, n + 1);
    p.x = 510; p.title = train_title; p.ylabel = "train loss (nats)";
    p.ymax = cap > 0 ? cap * 1.05 : 0;
    p.logy = wants_log(st, n, p.ymax);
    draw_panel(f, &p, st, n + 1);
    draw_legend(f, 1030, 60, sv, n + 1);
    return svg_close(f, path);
}

int plot_lr_sweep(const char* path, const band* b, int n, double unigram) {
    line s[MAX_COMPARE + 1];
    double bx[2] = {INFINITY, -INFINITY}, by[2];
    panel p;
    FILE* f;
    int k, i, crosses = 0, rings = 0;
    band_lines(b, n, s);
    for (k = 0; k < n; k++) {
        s[k].dots = 1;
        s[k].bars = 1;
        for (i = 0; i < b[k].n; i++) {
            if (b[k].x[i] < bx[0]) bx[0] = b[k].x[i];
            if (b[k].x[i] > bx[1]) bx[1] = b[k].x[i];
            crosses |= b[k].mark && b[k].mark[i] == 1;
            rings |= b[k].mark && b[k].mark[i] == 2;
        }
    }
    by[0] = by[1] = unigram;
    memset(&s[n], 0, sizeof s[n]);
    s[n].name = "unigram baseline"; s[n].color = "#555"; s[n].n = 2; s[n].x = bx; s[n].y = by; s[n].dashed = 1;
    if (!(f = svg_open(path, 840, 460))) return 1;
    memset(&p, 0, sizeof p);
    p.w = 640; p.h = 460; p.logx = 1;
    p.title = "Final validation loss against the learning rate";
    p.xlabel = "peak learning rate (log scale)";
    p.ylabel = "final validation loss (mean, min-max over seeds)";
    p.logy = wants_log(s, n, 0);
    draw_panel(f, &p, s, n + 1);
    draw_legend(f, 652, 60, s, n + 1);
    {
        double y = 60 + 18 * (n + 1) + 10;
        if (crosses) {
            svg_text(f, 652, y, "start", 12, "x at the top: every");
            svg_text(f, 652, y + 16, "start", 12, "seed diverged");
            y += 40;
        }
        if (rings) {
            svg_text(f, 652, y, "start", 12, "ring: a seed collapsed");
            svg_text(f, 652, y + 16, "start", 12, "to the unigram baseline");
        }
    }
    return svg_close(f, path);
}
