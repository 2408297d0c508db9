/* plot.c: CSV and SVG output: per-step logs, --diag's per-layer profiles, a sweep's curves,
   learning-rate and accuracy plots. Plain SVG written by hand: no plotting dependency. Every
   figure is 1400 px wide with text of 15 px and more (readable on a slide), and starts with a
   caption naming its run (presets, lrs, seeds, model, steps, data). Legends sit beside the
   panels, never over the data; values that span decades get a log axis, so the end of
   training (where presets differ) is as readable as the start. */
#include "train.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { FIG_W = 1400 };                       /* every figure's width (px) */
enum { FS_TICK = 15, FS_NOTE = 15, FS_LEGEND = 16, FS_AXIS = 17, FS_TITLE = 19, FS_CAPTION = 16 };
enum { LEGEND_ROW = 26 };

typedef struct line {
    const char* name;
    const char* color;
    int n;
    const double *x, *y;
    const double *lo, *hi;    /* optional: a band (or error bars) around y */
    const int *n_div, *n_col; /* optional: of `seeds` runs at point i, how many diverged (a
                                 cross in the strip at the top) and collapsed (a ring around
                                 the point), each labelled k/seeds */
    int seeds;
    int dashed, dots, bars;   /* dashed line; circles at the points; lo/hi as error bars */
    int fill;                 /* drawn as bars: a square in the legend */
} line;

typedef struct panel {
    double x, y, w, h;        /* the panel's box in the SVG, legend not included */
    const char *title, *xlabel, *ylabel;
    int logx, logy, int_x;
    double ymax;              /* > 0: values above are drawn at ymax (early transients) */
    const double* xticks;     /* optional: x ticks exactly at these values (the lrs swept) */
    int n_xticks;
    int dodge;                /* lines with error bars side by side at each x, not on top */
    int strip;                /* a strip at the top for the crosses of diverged runs */
    double yfix0, yfix1;      /* yfix1 > yfix0: the y axis spans exactly this (a quantity with a
                                 natural range, as a gate's [0, 1]), not the data's extent */
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

static void svg_text_fill(FILE* f, double x, double y, const char* anchor, int size,
                          const char* fill, const char* s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"", x, y, anchor, size);
    if (fill) fprintf(f, " fill=\"%s\"", fill);
    fputc('>', f);
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
    fputs("</text>\n", f);
}
static void svg_text(FILE* f, double x, double y, const char* anchor, int size, const char* s) {
    svg_text_fill(f, x, y, anchor, size, NULL, s);
}

/* ---- the caption: which run a figure shows ---- */

static void cat(char* buf, size_t n, const char* fmt, ...) {
    const size_t k = strlen(buf);
    va_list ap;
    if (k + 1 >= n) return;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}

/* "presets pre, hybrid | lr 0.003, 10 | seeds 1, 2 | d 32, 2 layers, 2 heads | batch 4 x seq
   24, 100 steps | 3-digit addition (padded), 20 held-out problems": the sweep's lists for a
   sweep's config, the one run's values for a run's */
static void run_caption(const config* c, char* buf, size_t n) {
    const char* p;
    nb_stack_desc d;
    int i, n_layers = c->model.n_layers;
    buf[0] = 0;
    if (c->sweep.compare) {
        cat(buf, n, "presets ");
        for (p = c->sweep.compare; *p; p++) cat(buf, n, *p == ',' ? ", " : "%c", *p);
    } else if (c->model.schedule[0]) cat(buf, n, "schedule %s", c->model.schedule);
    else cat(buf, n, "preset %s", c->model.preset);
    if (c->model.init[0]) cat(buf, n, ", init %s", c->model.init);
    /* the options a sweep over one preset compares (the other model flags: the checkpoint) */
    if (strcmp(c->model.norm.kind, "rms")) cat(buf, n, ", norm %s", c->model.norm.kind);
    if (c->model.attn.gate) cat(buf, n, ", %s gate", c->model.attn.gate == NB_GATE_HEADWISE ? "headwise" : "elementwise");
    if (c->model.attn.sink) cat(buf, n, ", %s sinks", c->model.attn.sink == NB_SINK_LEARNED ? "learned" : "off-by-one");
    if (c->optim.qk_clip > 0) cat(buf, n, ", QK-Clip %g", c->optim.qk_clip);
    cat(buf, n, " | lr ");
    for (i = 0; i < (c->sweep.n_lrs ? c->sweep.n_lrs : 1); i++) cat(buf, n, "%s%g", i ? ", " : "", c->sweep.n_lrs ? c->sweep.lrs[i] : c->optim.lr);
    cat(buf, n, " | seed%s ", c->sweep.n_seeds > 1 ? "s" : "");
    for (i = 0; i < (c->sweep.n_seeds ? c->sweep.n_seeds : 1); i++)
        cat(buf, n, "%s%llu", i ? ", " : "", c->sweep.n_seeds ? c->sweep.seeds[i] : c->loop.seed);
    if (c->model.schedule[0]) { /* the layers are the schedule's */
        nb_layer_desc layers[MAX_LAYERS];
        if (!make_desc(c, &d, layers)) n_layers = d.n_layers;
    }
    cat(buf, n, " | d %d, %d layers, %d heads", c->model.d_model, n_layers, c->model.n_heads);
    if (c->model.n_kv_heads && c->model.n_kv_heads != c->model.n_heads) cat(buf, n, " (%d kv)", c->model.n_kv_heads);
    if (c->model.ffn.d_ff) cat(buf, n, ", ff %d", c->model.ffn.d_ff);
    cat(buf, n, " | batch %d x seq %d, %d steps%s", c->loop.batch, c->loop.seq, c->loop.steps, c->machine.bf16 ? ", bf16" : "");
    if (c->data.path) cat(buf, n, " | data %s", (p = strrchr(c->data.path, '/')) ? p + 1 : c->data.path);
    else cat(buf, n, " | %d-digit addition (%s), %d held-out problems", c->data.digits,
             format_name(c->data.format), c->loop.eval_problems);
}

/* the caption at the top, wrapped at its " | "; returns the height it takes (f NULL: only
   that) */
static double draw_caption(FILE* f, const char* s) {
    const int max = (int)((FIG_W - 32) / (0.58 * FS_CAPTION));
    double y = 12 + FS_CAPTION;
    char buf[512];
    while (*s) {
        const char *cut = s + strlen(s), *q;
        if (cut - s > max) {
            cut = NULL;
            for (q = strstr(s, " | "); q && q - s <= max; q = strstr(q + 3, " | ")) cut = q;
            if (!cut) cut = s + max;
        }
        snprintf(buf, sizeof buf, "%.*s", (int)(cut - s), s);
        if (f) svg_text_fill(f, 16, y, "start", FS_CAPTION, "#333", buf);
        y += FS_CAPTION + 7;
        s = strncmp(cut, " | ", 3) ? cut : cut + 3;
    }
    return y;
}

/* ---- axes ---- */

typedef struct axes {
    double L, R, Tp, Bt;          /* the data area */
    double top;                   /* the frame's top: Tp, or above it with a strip */
    double x0, x1, y0, y1;        /* its range, in log10 units on a log axis */
    int logx, logy;
    double ymax;
    double dmin, dmax;            /* the data's y extent (linear axes) */
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
    a->dmin = ymin; a->dmax = ymax;
    if (xmax - xmin < 1e-12) { xmin -= 0.5; xmax += 0.5; }
    if (ymax - ymin < 1e-12) { ymin -= 0.5; ymax += 0.5; }
    if (a->logx) { xmin -= 0.08 * (xmax - xmin); xmax += 0.08 * (xmax - xmin); }
    if (a->logy) { /* a little room: no point on the frame */
        const double pad = 0.04 * (ymax - ymin);
        ymin = floor((ymin - pad) * 20) / 20;
        ymax = ceil((ymax + pad) * 20) / 20;
    }
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

/* one tick: a grid line and its label at value v of the x (vertical 0) or y axis */
static void tick(FILE* f, const axes* a, int vertical, double v, const char* label) {
    if (vertical && a->ymax > 0 && v > a->ymax * (1 + 1e-9)) return; /* would sit at ymax */
    if (vertical) {
        grid_line(f, a->L, ax_y(a, v), a->R, ax_y(a, v));
        svg_text(f, a->L - 8, ax_y(a, v) + 5, "end", FS_TICK, label);
    } else {
        grid_line(f, ax_x(a, v), a->Tp, ax_x(a, v), a->Bt);
        svg_text(f, ax_x(a, v), a->Bt + 22, "middle", FS_TICK, label);
    }
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
            tick(f, a, vertical, v, buf);
        }
}

static void lin_ticks(FILE* f, const axes* a, int vertical, int int_x) {
    const double lo = vertical ? a->y0 : a->x0, hi = vertical ? a->y1 : a->x1;
    double st = nice_step(hi - lo), v;
    char buf[32];
    if (!vertical && int_x && st < 1) st = 1;
    for (v = ceil(lo / st - 1e-9) * st; v <= hi + 1e-9 * st; v += st) {
        snprintf(buf, sizeof buf, "%g", fabs(v) < 1e-9 * st ? 0.0 : v);
        tick(f, a, vertical, v, buf);
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

static void cross(FILE* f, double x, double y, double r, const char* color) {
    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"2.6\"/>\n",
            x - r, y - r, x + r, y + r, x - r, y + r, x + r, y - r, color);
}

/* point i's runs that diverged (a cross in the top strip) or collapsed (a ring), k/seeds */
static void draw_counts(FILE* f, const axes* a, const line* s, int i, double x) {
    char buf[24];
    if (s->n_div && s->n_div[i] > 0) {
        cross(f, x, a->top + 14, 6, s->color);
        snprintf(buf, sizeof buf, "%d/%d", s->n_div[i], s->seeds);
        svg_text_fill(f, x, a->top + 42, "middle", FS_NOTE, s->color, buf);
    }
    if (s->n_col && s->n_col[i] > 0 && usable(a, s->x[i], s->y[i])) {
        const double y = ax_y(a, s->y[i]);
        double ly = y - 14;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"9\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                x, y, s->color);
        snprintf(buf, sizeof buf, "%d/%d", s->n_col[i], s->seeds);
        /* above the ring, and above the error bar's top cap where that reaches higher */
        if (s->bars && s->hi && usable(a, s->x[i], s->hi[i])) ly = fmin(ly, ax_y(a, s->hi[i]) - 7);
        svg_text_fill(f, x, ly, "middle", FS_NOTE, s->color, buf);
    }
}

/* line s, every point dx px to the right (dodge) */
static void draw_line(FILE* f, const axes* a, const line* s, double dx) {
    int i, open = 0;
    if (s->lo && s->hi && !s->bars) draw_band(f, a, s);
    for (i = 0; i < s->n; i++) {
        if (!usable(a, s->x[i], s->y[i])) { /* break the line at NaN/Inf */
            if (open) fputs("\"/>\n", f);
            open = 0;
            continue;
        }
        if (!open) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.4\"%s points=\"",
                    s->color, s->dashed ? " stroke-dasharray=\"8,5\"" : "");
            open = 1;
        }
        fprintf(f, "%.1f,%.1f ", ax_x(a, s->x[i]) + dx, ax_y(a, s->y[i]));
    }
    if (open) fputs("\"/>\n", f);
    for (i = 0; i < s->n; i++) {
        const double x = ax_x(a, s->x[i]) + dx;
        if (!isfinite(s->x[i])) continue;
        draw_counts(f, a, s, i, x);
        if (!usable(a, s->x[i], s->y[i])) continue;
        if (s->bars && s->lo && s->hi && usable(a, s->x[i], s->lo[i]) && usable(a, s->x[i], s->hi[i]))
            fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                    x, ax_y(a, s->lo[i]), ax_y(a, s->hi[i]), x - 6, ax_y(a, s->lo[i]), x + 6,
                    x - 6, ax_y(a, s->hi[i]), x + 6, s->color);
        if (s->dots || s->n == 1)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"/>\n", x, ax_y(a, s->y[i]), s->color);
    }
}

/* the data area of panel p (room for tick labels, axis labels, title, the strip) */
static void panel_axes(const panel* p, axes* a) {
    memset(a, 0, sizeof *a);
    a->L = p->x + 92; a->R = p->x + p->w - 16; a->top = p->y + 40; a->Bt = p->y + p->h - 66;
    a->Tp = a->top + (p->strip ? 54 : 0);
    a->logx = p->logx; a->logy = p->logy; a->ymax = p->ymax;
}

/* background, title, axis labels; the strip of diverged runs labelled */
static void panel_frame(FILE* f, const panel* p, const axes* a) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\"/>\n",
            a->L, a->top, a->R - a->L, a->Bt - a->top);
    svg_text(f, (a->L + a->R) / 2, p->y + 26, "middle", FS_TITLE, p->title);
    svg_text(f, (a->L + a->R) / 2, a->Bt + 50, "middle", FS_AXIS, p->xlabel);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
               "font-size=\"%d\">%s</text>\n", p->x + 22, (a->Tp + a->Bt) / 2, FS_AXIS, p->ylabel);
    if (p->strip) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n",
                a->L, a->top, a->R - a->L, a->Tp - a->top);
        svg_text_fill(f, a->L - 8, a->top + 32, "end", FS_TICK, "#555", "diverged");
    }
}

static void panel_border(FILE* f, const axes* a) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            a->L, a->top, a->R - a->L, a->Bt - a->top);
}

/* px between the dodged lines at one x: apart, within the smallest gap between ticks */
static double dodge_step(const axes* a, const panel* p, int nd) {
    double gap = a->R - a->L;
    int i;
    for (i = 1; i < p->n_xticks; i++) {
        const double g = ax_x(a, p->xticks[i]) - ax_x(a, p->xticks[i - 1]);
        if (g < gap) gap = g;
    }
    gap = 0.6 * gap / (nd > 1 ? nd : 1);
    return gap < 28 ? gap : 28;
}

/* One panel: frame, ticks, labels, lines. */
static void draw_panel(FILE* f, const panel* p, const line* s, int ns) {
    axes a;
    char buf[32];
    int k, i, nd = 0, j = 0;
    double step;
    char flat[96] = "";
    panel_axes(p, &a);
    fit(&a, s, ns);
    if (p->yfix1 > p->yfix0 && !a.logy) { a.y0 = p->yfix0; a.y1 = p->yfix1; }
    else if (!a.logy) { /* values equal up to float rounding: an axis of +-0.1% that says so, not
                           one that magnifies the rounding into structure */
        const double mid = 0.5 * (a.dmin + a.dmax), span = a.dmax - a.dmin;
        if (mid != 0 && span < 1e-4 * fabs(mid)) {
            a.y0 = mid - 1e-3 * fabs(mid);
            a.y1 = mid + 1e-3 * fabs(mid);
            snprintf(flat, sizeof flat, "flat: every value within %.2g of %.7g", span, mid);
        }
    }
    panel_frame(f, p, &a);
    for (i = 0; i < p->n_xticks; i++) {
        snprintf(buf, sizeof buf, "%g", p->xticks[i]);
        tick(f, &a, 0, p->xticks[i], buf);
    }
    if (!p->n_xticks) { if (a.logx) log_ticks(f, &a, 0); else lin_ticks(f, &a, 0, p->int_x); }
    if (a.logy) log_ticks(f, &a, 1); else lin_ticks(f, &a, 1, 0);
    panel_border(f, &a);
    for (k = 0; k < ns; k++) nd += s[k].bars;
    step = p->dodge ? dodge_step(&a, p, nd) : 0;
    for (k = 0; k < ns; k++) draw_line(f, &a, &s[k], s[k].bars ? step * (j++ - 0.5 * (nd - 1)) : 0);
    if (flat[0]) svg_text_fill(f, a.L + 10, a.Tp + 22, "start", FS_NOTE, "#444", flat);
}

/* the legend in its own column at (x, y), one entry per line (name NULL: none); returns the
   y below it */
/* a legend entry's name from x to the figure's right edge, wrapped at spaces onto further rows
   when longer (never clipped); returns the y of the next entry */
static double legend_text(FILE* f, double x, double y, const char* name) {
    const int fit = (int)((FIG_W - 6 - x) / (0.56 * FS_LEGEND)); /* characters per row, generous */
    char row[256];
    while ((int)strlen(name) > fit && fit > 8) {
        int cut = fit;
        while (cut > 0 && name[cut] != ' ') cut--;
        if (cut == 0) cut = fit; /* one long word: cut it */
        snprintf(row, sizeof row, "%.*s", cut, name);
        svg_text(f, x, y, "start", FS_LEGEND, row);
        name += cut + (name[cut] == ' ');
        y += FS_LEGEND + 4;
    }
    svg_text(f, x, y, "start", FS_LEGEND, name);
    return y + LEGEND_ROW;
}

static double draw_legend(FILE* f, double x, double y, const line* s, int ns) {
    int k;
    for (k = 0; k < ns; k++) {
        if (!s[k].name) continue;
        if (s[k].fill)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"18\" fill=\"%s\"/>\n", x + 6, y - 15, s[k].color);
        else fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"%s/>\n",
                x, y - 5, x + 30, y - 5, s[k].color, s[k].dashed ? " stroke-dasharray=\"8,5\"" : "");
        if (s[k].lo && !s[k].bars && !s[k].fill)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"30\" height=\"14\" fill=\"%s\" fill-opacity=\"0.18\"/>\n",
                    x, y - 12, s[k].color);
        if (s[k].dots || s[k].bars)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"/>\n", x + 15, y - 5, s[k].color);
        y = legend_text(f, x + 38, y, s[k].name);
    }
    return y;
}

/* lines of grey text under a legend (NULL-terminated), returns the y below them */
static double draw_notes(FILE* f, double x, double y, const char* const* lines) {
    for (y += 8; *lines; lines++, y += FS_NOTE + 6) svg_text_fill(f, x, y, "start", FS_NOTE, "#444", *lines);
    return y;
}

/* a FIG_W-wide figure: the caption of run c, then h px for the panels, which start at *top */
static FILE* svg_open(const char* path, double h, const config* c, double* top) {
    char cap[1024];
    FILE* f;
    run_caption(c, cap, sizeof cap);
    *top = draw_caption(NULL, cap);
    if (!(f = create_out(path))) return NULL;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
               "width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", FIG_W, h + *top, FIG_W, h + *top);
    draw_caption(f, cap);
    return f;
}
static int svg_close(FILE* f) {
    fputs("</svg>\n", f);
    return close_out(f);
}

/* a log y axis when the positive values span more than `factor` (a loss going to 0.01 on a
   linear axis hides everything after the first drop; so do tiny gradients of the first
   layers) */
static int wants_log(const line* s, int ns, double ymax, double factor) {
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
    return hi > factor * lo;
}

/* ---- --diag ---- */

/* column names: layer0.., x0.. (hidden states), d0_1.. (adjacent angular distance); the
   second stream (SiameseNorm's y) repeats them prefixed with y; the n streams of
   hyper-connections are s0_x0.., s1_x0.. and s0_d0_1..; the hyper-connections' gains of
   sublayer q are fwd_attn0, fwd_ffn0, .. then bwd_attn0, .. (stream 0 forward, 1 backward);
   head h of layer l is l<l>h<h>. arg: 1 with hyper-connections (hidden, angle), H for heads */
enum { COL_LAYER, COL_HIDDEN, COL_ANGLE, COL_GAIN, COL_HEAD };
static void col_name(FILE* f, int kind, int stream, int l, int arg) {
    const int hyper = arg;
    if (kind == COL_LAYER) fprintf(f, ",layer%d", l);
    else if (kind == COL_HEAD) fprintf(f, ",l%dh%d", l / arg, l % arg);
    else if (kind == COL_GAIN) fprintf(f, ",%s_%s%d", stream ? "bwd" : "fwd", l % 2 ? "ffn" : "attn", l / 2);
    else if (hyper) fprintf(f, kind == COL_HIDDEN ? ",s%d_x%d" : ",s%d_d%d_%d", stream, l, l + 1);
    else if (kind == COL_HIDDEN) fprintf(f, ",%c%d", stream ? 'y' : 'x', l);
    else fprintf(f, ",%sd%d_%d", stream ? "y" : "", l, l + 1);
}

/* rows x (streams x cols) values, row i at v + i * streams * cols; arg: col_name's */
static int csv_rows(const char* dir, const char* name, int kind, int cols, int streams, int arg,
                    int rows, const double* x, const double* v) {
    char path[1024];
    FILE* f = open_in(dir, name, path, sizeof path);
    int i, l, s;
    if (!f) return 1;
    fprintf(f, "step");
    for (s = 0; s < streams; s++)
        for (l = 0; l < cols; l++) col_name(f, kind, s, l, arg);
    fprintf(f, "\n");
    for (i = 0; i < rows; i++) {
        fprintf(f, "%.0f", x[i]);
        for (l = 0; l < streams * cols; l++) fprintf(f, ",%.6g", v[(size_t)i * streams * cols + l]);
        fprintf(f, "\n");
    }
    return close_out(f);
}

static int diag_csvs(const config* c, int L, const history* h) {
    const int S = h->streams;
    char path[1024];
    FILE* f;
    int i;
    if (!(f = open_in(c->files.diag, "loss.csv", path, sizeof path))) return 1;
    fprintf(f, "step,loss,grad_norm,lr\n"); /* every step */
    for (i = 0; i < h->n_steps; i++)
        fprintf(f, "%.0f,%.6g,%.6g,%.6g\n", h->step_x[i], h->loss[i], h->step_gnorm[i], h->step_lr[i]);
    if (close_out(f)) return 1;
    if (!(f = open_in(c->files.diag, "eval.csv", path, sizeof path))) return 1;
    fprintf(f, "step,val_loss,grad_norm\n");
    for (i = 0; i < h->n_eval; i++) fprintf(f, "%.0f,%.6g,%.6g\n", h->eval_x[i], h->val[i], h->gnorm[i]);
    if (close_out(f)) return 1;
    /* SiameseNorm: stream x columns, then stream y columns (prefixed y); hyper-connections:
       stream 0's, 1's, .. (prefixed s0_, s1_, ..) */
    return csv_rows(c->files.diag, "layer_grad_norms.csv", COL_LAYER, L, 1, 0, h->n_diag, h->diag_x, h->grad_l) ||
           csv_rows(c->files.diag, "hidden_norms.csv", COL_HIDDEN, L + 1, S, h->hyper, h->n_diag, h->diag_x, h->hid_l) ||
           csv_rows(c->files.diag, "angular_distance.csv", COL_ANGLE, L, S, h->hyper, h->n_diag, h->diag_x, h->ang_l) ||
           (h->hyper && csv_rows(c->files.diag, "hyper_gains.csv", COL_GAIN, 2 * L, 2, 0, h->n_diag, h->diag_x,
                                 h->hc_gain)) ||
           /* per layer and head (columns l0h0, l0h1, ..): nb_stack_head_stats over every rank */
           csv_rows(c->files.diag, "head_max_logit.csv", COL_HEAD, L * h->n_heads, 1, h->n_heads, h->n_diag,
                    h->diag_x, h->head_max_l) ||
           csv_rows(c->files.diag, "head_first_mass.csv", COL_HEAD, L * h->n_heads, 1, h->n_heads, h->n_diag,
                    h->diag_x, h->head_mass_l) ||
           (h->gated && csv_rows(c->files.diag, "head_gate.csv", COL_HEAD, L * h->n_heads, 1, h->n_heads,
                                 h->n_diag, h->diag_x, h->head_gate_l)) ||
           (h->sinks && csv_rows(c->files.diag, "head_sink_mass.csv", COL_HEAD, L * h->n_heads, 1,
                                 h->n_heads, h->n_diag, h->diag_x, h->head_sink_l));
}

static int diag_loss_svg(const config* c, const history* h, double unigram) {
    double bx[2], by[2], cap = 0, top;
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
    snprintf(path, sizeof path, "%s/loss.svg", c->files.diag);
    if (!(f = svg_open(path, 540, c, &top))) return 1;
    p.y = top; p.w = 1130; p.h = 540; p.title = "Loss"; p.xlabel = "training step";
    p.ylabel = "cross-entropy (nats/token)";
    p.ymax = cap * 1.05;
    p.logy = wants_log(s, 2, p.ymax, 20);
    draw_panel(f, &p, s, 3);
    draw_legend(f, 1140, top + 70, s, 3);
    return svg_close(f);
}

/* layers.svg: per-layer profiles at up to 4 points of training (one colour each); for
   SiameseNorm the hidden-state and angular panels have stream x solid and stream y dashed;
   with hyper-connections they show stream 0 (every stream: hyper.svg, the CSVs).
   Gradient norms and hidden-state magnitudes that span a decade get a log axis. */
static int diag_layers_svg(const config* c, int L, const history* h) {
    const int S = h->streams, np = h->n_diag < 4 ? h->n_diag : 4, SD = h->hyper ? 1 : S;
    double lx[MAX_LAYERS + 1], top;
    line sg[4], sh[8], sa[8], key[10];
    char names[4][32], path[1024], stream0[64];
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
        for (st = 0; st < SD; st++) {
            line* a = &sh[k * SD + st];
            line* b = &sa[k * SD + st];
            *a = *b = sg[k];
            a->dashed = b->dashed = st == 1;
            a->n = L + 1; a->y = h->hid_l + ((size_t)pick * S + st) * (L + 1);
            b->y = h->ang_l + ((size_t)pick * S + st) * L;
        }
        key[nk] = sg[k];
        key[nk++].name = names[k];
    }
    if (SD == 2) { /* the line styles of the two streams */
        key[nk].name = "stream x (HybridNorm)"; key[nk++].color = "#555";
        key[nk].name = "stream y (Pre-Norm)"; key[nk].color = "#555"; key[nk++].dashed = 1;
    }
    if (h->hyper) {
        snprintf(stream0, sizeof stream0, "stream 0 of %d (every stream: hyper.svg)", S);
        key[nk].name = stream0; key[nk++].color = "#555";
    }
    snprintf(path, sizeof path, "%s/layers.svg", c->files.diag);
    if (!(f = svg_open(path, 520, c, &top))) return 1;
    memset(&p, 0, sizeof p);
    p.y = top; p.w = 380; p.h = 520; p.int_x = 1;
    p.logy = wants_log(sg, np, 0, 10);
    p.title = "Gradient norm per layer"; p.xlabel = "layer l";
    p.ylabel = p.logy ? "||grad of block l||, L2 (log scale)" : "||grad of block l||, L2";
    draw_panel(f, &p, sg, np);
    p.x = 380; p.title = "Hidden-state magnitude"; p.xlabel = "l (input of block l; L = output)";
    p.logy = wants_log(sh, np * SD, 0, 10);
    p.ylabel = p.logy ? "mean ||x_l|| per token (log scale)" : "mean ||x_l|| per token";
    draw_panel(f, &p, sh, np * SD);
    p.x = 760; p.title = "Angular distance d(l, l+1)"; p.xlabel = "layer l"; p.logy = 0;
    p.ylabel = "arccos(cos(x_l, x_l+1)) / pi (0 to 1)";
    draw_panel(f, &p, sa, np * SD);
    draw_legend(f, 1150, top + 70, key, nk);
    return svg_close(f);
}

/* hyper.svg (hyper-connections): the composite Amax gain per sublayer at up to 4 points of
   training (forward solid, backward dashed; log axis past a decade), and every stream's
   hidden-state magnitude per layer at the last of them (one colour per stream). */
static int diag_hyper_svg(const config* c, int L, const history* h) {
    const int S = h->streams, Q = 2 * L, np = h->n_diag < 4 ? h->n_diag : 4, last = h->n_diag - 1;
    double qx[2 * MAX_LAYERS], lx[MAX_LAYERS + 1], top;
    line sg[8], ss[NB_HYPER_MAX_STREAMS], key[6];
    char names[4][32], snames[NB_HYPER_MAX_STREAMS][24], title[64], path[1024];
    panel p;
    FILE* f;
    int k, q, nk = 0;
    memset(sg, 0, sizeof sg); memset(ss, 0, sizeof ss); memset(key, 0, sizeof key);
    for (q = 0; q < Q; q++) qx[q] = q;
    for (k = 0; k <= L; k++) lx[k] = k;
    for (k = 0; k < np; k++) {
        const int pick = np == 1 ? 0 : (int)((double)k * (h->n_diag - 1) / (np - 1) + 0.5);
        snprintf(names[k], sizeof names[k], "step %.0f", h->diag_x[pick]);
        for (q = 0; q < 2; q++) {
            line* a = &sg[2 * k + q];
            a->color = k_time_colors[4 - np + k];
            a->x = qx; a->n = Q; a->dots = 1; a->dashed = q;
            a->y = h->hc_gain + ((size_t)pick * 2 + q) * Q;
        }
        key[nk] = sg[2 * k];
        key[nk++].name = names[k];
    }
    key[nk].name = "forward gain"; key[nk++].color = "#555";
    key[nk].name = "backward gain"; key[nk].color = "#555"; key[nk++].dashed = 1;
    for (k = 0; k < S; k++) {
        snprintf(snames[k], sizeof snames[k], "stream %d", k);
        ss[k].name = snames[k]; ss[k].color = k_colors[k % 10];
        ss[k].x = lx; ss[k].n = L + 1; ss[k].dots = 1;
        ss[k].y = h->hid_l + ((size_t)last * S + k) * (L + 1);
    }
    snprintf(path, sizeof path, "%s/hyper.svg", c->files.diag);
    if (!(f = svg_open(path, 520, c, &top))) return 1;
    memset(&p, 0, sizeof p);
    p.y = top; p.w = 575; p.h = 520; p.int_x = 1;
    p.logy = wants_log(sg, 2 * np, 0, 10);
    p.title = "Composite gain of the stream mixing"; p.xlabel = "sublayer q (2l attention, 2l+1 FFN)";
    p.ylabel = p.logy ? "Amax gain, mean over tokens (log scale)" : "Amax gain, mean over tokens";
    draw_panel(f, &p, sg, 2 * np);
    snprintf(title, sizeof title, "Magnitude per stream, step %.0f", h->diag_x[last]);
    p.x = 575; p.title = title; p.xlabel = "l (input of block l; L = output)";
    p.logy = wants_log(ss, S, 0, 10);
    p.ylabel = p.logy ? "mean ||x_l|| per token (log scale)" : "mean ||x_l|| per token";
    draw_panel(f, &p, ss, S);
    {   /* two legends, each headed by its panel: steps and gains, then streams */
        double y = top + 70;
        svg_text_fill(f, 1160, y - 24, "start", FS_NOTE, "#444", "left panel:");
        y = draw_legend(f, 1160, y, key, nk) + 10;
        svg_text_fill(f, 1160, y, "start", FS_NOTE, "#444", "right panel:");
        draw_legend(f, 1160, y + 26, ss, S);
    }
    return svg_close(f);
}

/* snapshot k of np spread over the logged steps: its index; line s named ("step N") and
   coloured for it (name: the caller's buffer of n) */
static int snapshot(const history* h, int k, int np, line* s, char* name, size_t n) {
    const int pick = np == 1 ? 0 : (int)((double)k * (h->n_diag - 1) / (np - 1) + 0.5);
    snprintf(name, n, "step %.0f", h->diag_x[pick]);
    s->name = name;
    s->color = k_time_colors[4 - np + k];
    return pick;
}

/* heads.svg: per layer, the largest logit over its heads and its heads' mean first-key mass
   (the attention sink), at up to 4 points of training (one colour each). */
static int diag_heads_svg(const config* c, int L, const history* h) {
    const int H = h->n_heads, np = h->n_diag < 4 ? h->n_diag : 4;
    double lx[MAX_LAYERS], top, *v = (double*)xcalloc((size_t)np * 2 * L, sizeof(double));
    double tau_x[2], tau_y[2];
    line sm[5], sf[4];
    char names[4][32], tau_name[48], path[1024];
    panel p;
    FILE* f;
    int k, l, j, nm = np;
    memset(sm, 0, sizeof sm); memset(sf, 0, sizeof sf);
    for (l = 0; l < L; l++) lx[l] = l;
    if (c->optim.qk_clip > 0) { /* the threshold in force: QK-Clip scales a head above it */
        tau_x[0] = 0; tau_x[1] = L > 1 ? L - 1 : 1;
        tau_y[0] = tau_y[1] = c->optim.qk_clip;
        snprintf(tau_name, sizeof tau_name, "QK-Clip's tau (%g)", c->optim.qk_clip);
        sm[nm].name = tau_name; sm[nm].color = "#555"; sm[nm].dashed = 1;
        sm[nm].x = tau_x; sm[nm].y = tau_y; sm[nm++].n = 2;
    }
    for (k = 0; k < np; k++) {
        const int pick = snapshot(h, k, np, &sm[k], names[k], sizeof names[k]);
        const double *mx = h->head_max_l + (size_t)pick * L * H, *ms = h->head_mass_l + (size_t)pick * L * H;
        double *ymax = v + (size_t)k * 2 * L, *ymass = ymax + L;
        for (l = 0; l < L; l++) {
            ymax[l] = mx[l * H];
            for (j = 1; j < H; j++) ymax[l] = fmax(ymax[l], mx[l * H + j]);
            ymass[l] = 0;
            for (j = 0; j < H; j++) ymass[l] += ms[l * H + j] / H;
        }
        sm[k].x = lx; sm[k].n = L; sm[k].y = ymax; sm[k].dots = 1;
        sf[k] = sm[k];
        sf[k].y = ymass;
    }
    snprintf(path, sizeof path, "%s/heads.svg", c->files.diag);
    if (!(f = svg_open(path, 520, c, &top))) { free(v); return 1; }
    memset(&p, 0, sizeof p);
    p.y = top; p.w = 575; p.h = 520; p.int_x = 1;
    p.title = "Largest attention logit"; p.xlabel = "layer l";
    p.ylabel = "max over heads of the max logit (QK-Clip's S_max)";
    draw_panel(f, &p, sm, nm);
    p.x = 575; p.title = "First-key attention mass"; p.xlabel = "layer l";
    p.ylabel = "mean over heads and query rows of P[i][0]";
    draw_panel(f, &p, sf, np);
    draw_legend(f, 1160, top + 70, sm, nm);
    free(v);
    return svg_close(f);
}

/* gates.svg (gated attention): per layer, the mean gate sigmoid(G) over its heads and its
   smallest head's, at up to 4 points of training, on the gate's whole range [0, 1] */
static int diag_gates_svg(const config* c, int L, const history* h) {
    const int H = h->n_heads, np = h->n_diag < 4 ? h->n_diag : 4;
    double lx[MAX_LAYERS], top, *v = (double*)xcalloc((size_t)np * 2 * L, sizeof(double));
    line sm[4], sn[4];
    char names[4][32], path[1024];
    panel p;
    FILE* f;
    int k, l, j;
    memset(sm, 0, sizeof sm); memset(sn, 0, sizeof sn);
    for (l = 0; l < L; l++) lx[l] = l;
    for (k = 0; k < np; k++) {
        const int pick = snapshot(h, k, np, &sm[k], names[k], sizeof names[k]);
        const double* g = h->head_gate_l + (size_t)pick * L * H;
        double *ymean = v + (size_t)k * 2 * L, *ymin = ymean + L;
        for (l = 0; l < L; l++) {
            ymean[l] = 0;
            ymin[l] = g[l * H];
            for (j = 0; j < H; j++) {
                ymean[l] += g[l * H + j] / H;
                ymin[l] = fmin(ymin[l], g[l * H + j]);
            }
        }
        sm[k].x = lx; sm[k].n = L; sm[k].y = ymean; sm[k].dots = 1;
        sn[k] = sm[k];
        sn[k].y = ymin;
    }
    snprintf(path, sizeof path, "%s/gates.svg", c->files.diag);
    if (!(f = svg_open(path, 520, c, &top))) { free(v); return 1; }
    memset(&p, 0, sizeof p);
    p.y = top; p.w = 575; p.h = 520; p.int_x = 1;
    p.yfix0 = 0; p.yfix1 = 1;
    p.title = "Attention gate, mean over heads"; p.xlabel = "layer l";
    p.ylabel = "mean over tokens of sigmoid(G)";
    draw_panel(f, &p, sm, np);
    p.x = 575; p.title = "The layer's most closed head"; p.xlabel = "layer l";
    p.ylabel = "smallest head mean of sigmoid(G)";
    draw_panel(f, &p, sn, np);
    draw_legend(f, 1160, top + 70, sm, np);
    free(v);
    return svg_close(f);
}

int write_diag(const config* c, const model* m, const history* h, double unigram) {
    const int L = m->s.desc.n_layers;
    if (make_dir(c->files.diag) || diag_csvs(c, L, h) || diag_loss_svg(c, h, unigram)) return 1;
    if (h->n_diag > 0 && h->hyper && diag_hyper_svg(c, L, h)) return 1;
    if (h->n_diag > 0 && diag_heads_svg(c, L, h)) return 1;
    if (h->n_diag > 0 && h->gated && diag_gates_svg(c, L, h)) return 1;
    return h->n_diag > 0 ? diag_layers_svg(c, L, h) : 0;
}

/* every training step: loss, global gradient norm (before clipping), learning rate, the
   largest attention logit of its forward (before its QK-Clip) and the heads clipped after it */
int write_steps_csv(const char* path, const history* h) {
    FILE* f = create_out(path);
    int i;
    if (!f) return 1;
    fprintf(f, "step,loss,grad_norm,lr,max_logit,qk_clipped\n");
    for (i = 0; i < h->n_steps; i++)
        fprintf(f, "%.0f,%.9g,%.9g,%.9g,%.9g,%.0f\n", h->step_x[i], h->loss[i], h->step_gnorm[i],
                h->step_lr[i], h->step_maxlogit[i], h->step_clipped[i]);
    return close_out(f);
}

/* ---- sweeps ---- */

static void band_lines(const band* b, int n, line* s) {
    int k;
    memset(s, 0, (size_t)n * sizeof *s);
    for (k = 0; k < n; k++) {
        s[k].name = b[k].name; s[k].color = k_colors[k % 10]; s[k].n = b[k].n;
        s[k].x = b[k].x; s[k].y = b[k].y; s[k].lo = b[k].lo; s[k].hi = b[k].hi;
        s[k].n_div = b[k].n_div; s[k].n_col = b[k].n_col; s[k].seeds = b[k].seeds;
    }
}

/* the dashed unigram baseline across the x range of the bands */
static void baseline(const band* b, int n, double unigram, double* bx, double* by, line* s) {
    int k, i;
    bx[0] = INFINITY; bx[1] = -INFINITY;
    for (k = 0; k < n; k++)
        for (i = 0; i < b[k].n; i++) {
            if (b[k].x[i] < bx[0]) bx[0] = b[k].x[i];
            if (b[k].x[i] > bx[1]) bx[1] = b[k].x[i];
        }
    if (!(bx[0] <= bx[1])) { bx[0] = 0; bx[1] = 1; }
    by[0] = by[1] = unigram;
    memset(s, 0, sizeof *s);
    s->name = "unigram baseline"; s->color = "#555"; s->n = 2; s->x = bx; s->y = by; s->dashed = 1;
}

int plot_compare(const char* path, const config* c, const char* title, const char* train_title,
                 const band* val, const band* train, int n, double unigram) {
    static const char* const notes[] = {"line: mean over seeds", "band: min-max over seeds", NULL};
    line sv[MAX_COMPARE + 1], st[MAX_COMPARE + 1];
    double bx[2], by[2], cap = 0, top;
    panel p;
    FILE* f;
    int k, i;
    band_lines(val, n, sv);
    band_lines(train, n, st);
    for (k = 0; k < n; k++) {
        sv[k].dots = 1;
        st[k].name = NULL;
        /* the train panel starts after the first 5% of steps: the drop from ln 256 would
           squeeze everything else */
        for (i = train[k].n / 20; i < train[k].n; i++)
            if (isfinite(train[k].y[i]) && train[k].y[i] > cap) cap = train[k].y[i];
    }
    baseline(train, n, unigram, bx, by, &sv[n]);
    st[n] = sv[n];
    if (!(f = svg_open(path, 540, c, &top))) return 1;
    memset(&p, 0, sizeof p);
    p.y = top; p.w = 575; p.h = 540; p.title = title; p.xlabel = "training step";
    p.ylabel = "validation loss (nats/token)";
    p.logy = wants_log(sv, n, 0, 20);
    draw_panel(f, &p, sv, n + 1);
    p.x = 575; p.title = train_title; p.ylabel = "train loss (nats/token)";
    p.ymax = cap > 0 ? cap * 1.05 : 0;
    p.logy = wants_log(st, n, p.ymax, 20);
    draw_panel(f, &p, st, n + 1);
    i = n > 0 && val[0].lo ? 0 : 1;   /* one seed: no band to explain */
    draw_notes(f, 1160, draw_legend(f, 1160, top + 70, sv, n + 1), notes + i);
    return svg_close(f);
}

int plot_lr_sweep(const char* path, const config* c, const band* b, int n, double unigram) {
    static const char* const notes[] = {"dot: mean over the seeds that", "finished; bar: min-max",
                                        "x k/N at the top: k of N", "seeds diverged",
                                        "ring k/N: k of N seeds", "collapsed to the baseline", NULL};
    line s[MAX_COMPARE + 1];
    double bx[2], by[2], top;
    panel p;
    FILE* f;
    int k, i;
    band_lines(b, n, s);
    memset(&p, 0, sizeof p);
    for (k = 0; k < n; k++) {
        s[k].dots = 1;
        s[k].bars = 1;
        for (i = 0; i < b[k].n; i++) p.strip |= b[k].n_div && b[k].n_div[i] > 0;
    }
    baseline(b, n, unigram, bx, by, &s[n]);
    if (!(f = svg_open(path, 560, c, &top))) return 1;
    p.y = top; p.w = 1130; p.h = 560; p.logx = 1; p.dodge = 1;
    p.xticks = n > 0 ? b[0].x : NULL;
    p.n_xticks = n > 0 ? b[0].n : 0;
    p.title = "Final validation loss against the learning rate";
    p.xlabel = "peak learning rate (log scale; ticks at the rates tried)";
    p.ylabel = "final validation loss (nats/token)";
    p.logy = wants_log(s, n, 0, 20);
    draw_panel(f, &p, s, n + 1);
    draw_notes(f, 1140, draw_legend(f, 1140, top + 70, s, n + 1), notes);
    return svg_close(f);
}

/* grouped bars on a 0-100% axis: group g (one lr) holds one bar per line (y[g] in [0, 1],
   lo/hi a whisker); no value (no seed finished): a cross. names: preset names under the bars
   (one group), else the lr under each group. */
static void draw_bars(FILE* f, const axes* a, const line* s, int ns, int names) {
    const int groups = ns > 0 ? s[0].n : 0;
    const double slot = (a->R - a->L) / (groups > 0 ? groups : 1), bw = fmin(0.8 * slot / ns, 120);
    char buf[32];
    int g, k;
    for (g = 0; g < groups; g++) {
        for (k = 0; k < ns; k++) {
            const double x = a->L + slot * (g + 0.5) + bw * (k + 0.5 - 0.5 * ns), v = 100 * s[k].y[g];
            const double hi = isfinite(s[k].hi[g]) ? 100 * s[k].hi[g] : v;
            if (names) svg_text(f, x, a->Bt + 22, "middle", FS_TICK, s[k].name);
            if (!isfinite(v)) { cross(f, x, a->Bt - 12, 6, s[k].color); continue; }
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                    x - bw / 2 + 2, ax_y(a, v), bw - 4, a->Bt - ax_y(a, v), s[k].color);
            if (hi > v || 100 * s[k].lo[g] < v)
                fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"#222\" stroke-width=\"1.6\"/>\n",
                        x, ax_y(a, 100 * s[k].lo[g]), ax_y(a, hi), x - 5, ax_y(a, 100 * s[k].lo[g]), x + 5,
                        x - 5, ax_y(a, hi), x + 5);
            snprintf(buf, sizeof buf, "%.0f%%", v);
            if (bw >= 36) svg_text(f, x, ax_y(a, hi) - 6, "middle", FS_NOTE, buf);
        }
        snprintf(buf, sizeof buf, "%g", s[0].x[g]);
        if (!names) svg_text(f, a->L + slot * (g + 0.5), a->Bt + 22, "middle", FS_TICK, buf);
    }
}

int plot_accuracy(const char* path, const config* c, const band* b, int n) {
    static const char* const notes[] = {"bar: mean over the seeds that", "finished; whisker: min-max",
                                        "x: every seed diverged", NULL};
    const int one_lr = n > 0 && b[0].n == 1;
    line s[MAX_COMPARE];
    char xlabel[96], ylabel[96];
    double top;
    panel p;
    axes a;
    FILE* f;
    int k;
    band_lines(b, n, s);
    for (k = 0; k < n; k++) s[k].fill = 1;
    if (!(f = svg_open(path, 560, c, &top))) return 1;
    memset(&p, 0, sizeof p);
    p.y = top; p.w = 1130; p.h = 560;
    p.title = one_lr ? "Answer accuracy on held-out problems" : "Answer accuracy against the learning rate";
    if (one_lr) snprintf(xlabel, sizeof xlabel, "preset (peak learning rate %g)", b[0].x[0]);
    else snprintf(xlabel, sizeof xlabel, "peak learning rate (the rates tried)");
    snprintf(ylabel, sizeof ylabel, "exact-match accuracy (%% of %d problems)", c->loop.eval_problems);
    p.xlabel = xlabel; p.ylabel = ylabel;
    panel_axes(&p, &a);
    a.x1 = 1; a.y1 = 112;   /* room for the labels above 100% */
    panel_frame(f, &p, &a);
    lin_ticks(f, &a, 1, 0);
    panel_border(f, &a);
    draw_bars(f, &a, s, n, one_lr);
    draw_notes(f, 1140, draw_legend(f, 1140, top + 70, s, n), notes);
    return svg_close(f);
}
