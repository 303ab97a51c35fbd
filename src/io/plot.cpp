// plot.cpp: see plot.h. A white RGB canvas, axes with "nice" tick values, lines drawn as runs of
// filled squares, text from stb_easy_font's quads scaled up; the PNG is encoded in memory by
// stb_image_write and written atomically. The one translation unit with the stb implementation.
#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/common.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

namespace beagle {

namespace {

struct Canvas {
    int W, H;
    std::vector<uint8_t> px;
    Canvas(int w, int h) : W(w), H(h), px((size_t)w * h * 3, 255) {}

    void put(int x, int y, uint32_t rgb) {
        if (x < 0 || y < 0 || x >= W || y >= H) return;
        uint8_t* p = &px[((size_t)y * W + x) * 3];
        p[0] = (uint8_t)(rgb >> 16);
        p[1] = (uint8_t)(rgb >> 8);
        p[2] = (uint8_t)rgb;
    }
    void rect(int x0, int y0, int x1, int y1, uint32_t rgb) {  // [x0, x1) x [y0, y1)
        for (int y = std::max(0, y0); y < std::min(H, y1); y++)
            for (int x = std::max(0, x0); x < std::min(W, x1); x++) put(x, y, rgb);
    }
    // line of the given width from (x0, y0) to (x1, y1); dash > 0: dashes of that many pixels
    void line(double x0, double y0, double x1, double y1, uint32_t rgb, int width, int dash = 0) {
        double dx = x1 - x0, dy = y1 - y0;
        int n = (int)std::ceil(std::max(std::fabs(dx), std::fabs(dy))) + 1;
        int h0 = width / 2;
        for (int i = 0; i <= n; i++) {
            if (dash > 0 && (i / dash) % 2) continue;
            double t = (double)i / n;
            int x = (int)std::lround(x0 + t * dx), y = (int)std::lround(y0 + t * dy);
            rect(x - h0, y - h0, x - h0 + width, y - h0 + width, rgb);
        }
    }
    // text with its top-left corner at (x, y); each font pixel becomes scale x scale
    void text(int x, int y, const std::string& s, uint32_t rgb, int scale = 2) {
        std::vector<char> buf(s.size() * 300 + 1000);
        std::string tmp = s;
        int q = stb_easy_font_print(0, 0, &tmp[0], nullptr, buf.data(), (int)buf.size());
        for (int i = 0; i < q; i++) {
            const float* v0 = (const float*)(buf.data() + (size_t)i * 64);       // vertex 0: x, y, z, color
            const float* v2 = (const float*)(buf.data() + (size_t)i * 64 + 32);  // vertex 2 (opposite corner)
            int qx0 = (int)std::lround(std::min(v0[0], v2[0]) * scale), qx1 = (int)std::lround(std::max(v0[0], v2[0]) * scale);
            int qy0 = (int)std::lround(std::min(v0[1], v2[1]) * scale), qy1 = (int)std::lround(std::max(v0[1], v2[1]) * scale);
            rect(x + qx0, y + qy0, x + qx1, y + qy1, rgb);
        }
    }
    static int text_width(const std::string& s, int scale = 2) {
        std::string tmp = s;
        return stb_easy_font_width(&tmp[0]) * scale;
    }
    // text rotated by 90 degrees (reading bottom to top), its left end at (x, y_bottom)
    void text_vertical(int x, int y_bottom, const std::string& s, uint32_t rgb, int scale = 2) {
        int w = text_width(s, scale), h = 8 * scale;
        Canvas t(std::max(w, 1), h);
        t.text(0, 0, s, 0x000000, scale);
        for (int ty = 0; ty < h; ty++)
            for (int tx = 0; tx < w; tx++)
                if (t.px[((size_t)ty * t.W + tx) * 3] < 128) put(x + ty, y_bottom - tx, rgb);
    }
};

// Tick values: about n "nice" steps (1, 2, 5 x 10^k) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int n, double* step_out) {
    double span = hi - lo;
    if (!(span > 0)) span = std::fabs(hi) > 0 ? std::fabs(hi) : 1.0;
    double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
    std::vector<double> t;
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    *step_out = step;
    return t;
}

std::string tick_label(double v, double step) {
    if (std::fabs(v) >= 1e5 || (step < 1e-3 && v != 0)) return strfmt("%.3g", v);
    int dec = step >= 1 ? 0 : (int)std::ceil(-std::log10(step) - 1e-9);
    return strfmt("%.*f", dec, v);
}

void write_png(const std::string& path, const Canvas& c) {
    std::vector<uint8_t> out;
    auto sink = [](void* ctx, void* data, int size) {
        auto* o = (std::vector<uint8_t>*)ctx;
        o->insert(o->end(), (uint8_t*)data, (uint8_t*)data + size);
    };
    if (!stbi_write_png_to_func(sink, &out, c.W, c.H, 3, c.px.data(), c.W * 3) || out.empty())
        fail("cannot encode PNG for '%s' (%d x %d)", path.c_str(), c.W, c.H);
    write_file_atomic(path, out.data(), out.size());
}

const uint32_t kAxis = 0x000000, kGrid = 0xe4e4e4, kText = 0x202020;

// The frame every chart shares: title, plot area, axis labels. Returns the plot area.
struct Frame {
    int x0, y0, x1, y1;  // plot area in pixels (y0 top)
};
Frame draw_frame(Canvas& cv, const std::string& title, const std::string& xlabel, const std::string& ylabel) {
    Frame f{96, 56, cv.W - 30, cv.H - 74};
    int ts = Canvas::text_width(title, 3) <= cv.W - 20 ? 3 : 2;  // shrink a long title to fit
    cv.text((cv.W - Canvas::text_width(title, ts)) / 2, 14, title, kText, ts);
    cv.text((f.x0 + f.x1 - Canvas::text_width(xlabel)) / 2, cv.H - 30, xlabel, kText);
    cv.text_vertical(14, (f.y0 + f.y1 + Canvas::text_width(ylabel)) / 2, ylabel, kText);
    return f;
}

}  // namespace

void write_line_chart(const std::string& path, const LineChart& c, int width, int height) {
    Canvas cv(width, height);
    Frame f = draw_frame(cv, c.title, c.xlabel, c.ylabel);
    double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
    auto ty = [&](double y) { return c.log_y ? std::log10(std::max(y, 1e-12)) : y; };
    auto tx = [&](double x) { return c.log_x ? std::log10(std::max(x, 1e-12)) : x; };
    for (const LineSeries& s : c.series)
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++) {
            if (!std::isfinite(s.y[i])) continue;
            xmin = std::min(xmin, tx(s.x[i]));
            xmax = std::max(xmax, tx(s.x[i]));
            ymin = std::min(ymin, ty(s.y[i]));
            ymax = std::max(ymax, ty(s.y[i]));
        }
    if (xmin > xmax) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + 1;
    double pad = (ymax - ymin) * 0.05;
    ymin -= pad;
    ymax += pad;
    if (!c.log_y && ymin < 0 && ymin > -pad * 1.01) ymin = 0;
    auto px = [&](double x) { return f.x0 + (tx(x) - xmin) / (xmax - xmin) * (f.x1 - f.x0); };
    auto py = [&](double y) { return f.y1 - (ty(y) - ymin) / (ymax - ymin) * (f.y1 - f.y0); };
    // grid and tick labels
    double ys, xs;
    for (double v : nice_ticks(ymin, ymax, 6, &ys)) {
        double yy = f.y1 - (v - ymin) / (ymax - ymin) * (f.y1 - f.y0);
        cv.line(f.x0, yy, f.x1, yy, kGrid, 1);
        std::string l = c.log_y ? strfmt("%.3g", std::pow(10.0, v)) : tick_label(v, ys);
        cv.text(f.x0 - 8 - Canvas::text_width(l), (int)yy - 7, l, kText);
    }
    for (double v : nice_ticks(xmin, xmax, 8, &xs)) {
        double xx = f.x0 + (v - xmin) / (xmax - xmin) * (f.x1 - f.x0);
        cv.line(xx, f.y0, xx, f.y1, kGrid, 1);
        std::string l = c.log_x ? strfmt("%.3g", std::pow(10.0, v)) : tick_label(v, xs);
        cv.text((int)xx - Canvas::text_width(l) / 2, f.y1 + 8, l, kText);
    }
    for (auto& vl : c.vlines) {
        double xx = px(vl.first);
        cv.line(xx, f.y0, xx, f.y1, 0x808080, 2, 6);
        cv.text((int)xx + 6, f.y0 + 6, vl.second, 0x606060);
    }
    for (const LineSeries& s : c.series) {
        bool have = false;
        double lx = 0, ly = 0;
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++) {
            if (!std::isfinite(s.y[i])) {
                have = false;
                continue;
            }
            double X = px(s.x[i]), Y = py(s.y[i]);
            if (have) cv.line(lx, ly, X, Y, s.rgb, s.width);
            else cv.rect((int)X - s.width / 2, (int)Y - s.width / 2, (int)X - s.width / 2 + s.width, (int)Y - s.width / 2 + s.width, s.rgb);
            lx = X, ly = Y, have = true;
        }
    }
    // axes
    cv.line(f.x0, f.y0, f.x0, f.y1, kAxis, 2);
    cv.line(f.x0, f.y1, f.x1, f.y1, kAxis, 2);
    // legend, top right (or bottom right)
    int n_labels = 0;
    for (const LineSeries& s : c.series) n_labels += !s.label.empty();
    int ly = c.legend_bottom ? f.y1 - 8 - 24 * n_labels : f.y0 + 8;
    int lw = 0;
    for (const LineSeries& s : c.series) lw = std::max(lw, Canvas::text_width(s.label));
    for (const LineSeries& s : c.series) {
        if (s.label.empty()) continue;
        int lx = f.x1 - lw - 48;
        cv.rect(lx - 6, ly - 4, f.x1 - 4, ly + 20, 0xffffff);
        cv.line(lx, ly + 7, lx + 28, ly + 7, s.rgb, 3);
        cv.text(lx + 36, ly, s.label, kText);
        ly += 24;
    }
    write_png(path, cv);
}

void write_bar_chart(const std::string& path, const BarChart& c, int width, int height) {
    Canvas cv(width, height);
    Frame f = draw_frame(cv, c.title, c.xlabel, c.ylabel);
    double ymax = c.ymax;
    if (ymax <= 0)
        for (const BarGroup& g : c.groups)
            for (double v : g.values)
                if (std::isfinite(v)) ymax = std::max(ymax, v * 1.1);
    if (ymax <= 0) ymax = 1;
    if (c.ymax <= 0) {  // headroom: the tallest bar ends below the legend box (top right)
        double legend_frac = (double)(24 * (int)c.groups.size() + 30) / std::max(1, f.y1 - f.y0);
        if (legend_frac < 0.6) ymax = ymax / 1.1 / (1.0 - legend_frac);
    }
    auto py = [&](double y) { return f.y1 - y / ymax * (f.y1 - f.y0); };
    double ys;
    for (double v : nice_ticks(0, ymax, 5, &ys)) {
        double yy = py(v);
        if (v > ymax) break;
        cv.line(f.x0, yy, f.x1, yy, kGrid, 1);
        std::string l = tick_label(v, ys);
        cv.text(f.x0 - 8 - Canvas::text_width(l), (int)yy - 7, l, kText);
    }
    int nc = std::max<int>(1, (int)c.categories.size()), ng = std::max<int>(1, (int)c.groups.size());
    double slot = (double)(f.x1 - f.x0) / nc, bw = slot * 0.8 / ng;
    for (int k = 0; k < nc && k < (int)c.categories.size(); k++) {
        double sx = f.x0 + k * slot + slot * 0.1;
        for (int g = 0; g < (int)c.groups.size(); g++) {
            const BarGroup& G = c.groups[g];
            if (k >= (int)G.values.size() || !std::isfinite(G.values[k])) continue;
            double v = std::min(G.values[k], ymax);
            int bx0 = (int)(sx + g * bw), bx1 = (int)(sx + (g + 1) * bw) - 2;
            cv.rect(bx0, (int)py(v), bx1, f.y1, G.rgb);
            if (c.value_labels) {
                std::string l = strfmt("%.2f", G.values[k]);
                int s = Canvas::text_width(l) <= bx1 - bx0 + 6 ? 2 : 1;
                cv.text((bx0 + bx1 - Canvas::text_width(l, s)) / 2, (int)py(v) - 8 * s - 2, l, kText, s);
            }
        }
        const std::string& cl = c.categories[k];
        int ls = Canvas::text_width(cl) <= slot - 6 ? 2 : 1;  // a long category name in the small font
        cv.text((int)(f.x0 + (k + 0.5) * slot) - Canvas::text_width(cl, ls) / 2, f.y1 + 8, cl, kText, ls);
    }
    cv.line(f.x0, f.y0, f.x0, f.y1, kAxis, 2);
    cv.line(f.x0, f.y1, f.x1, f.y1, kAxis, 2);
    int lw = 0;
    for (const BarGroup& g : c.groups) lw = std::max(lw, Canvas::text_width(g.label));
    int ly = f.y0 + 8;
    for (const BarGroup& g : c.groups) {
        int lx = f.x1 - lw - 40;
        cv.rect(lx - 6, ly - 4, f.x1 - 4, ly + 20, 0xffffff);
        cv.rect(lx, ly, lx + 20, ly + 14, g.rgb);
        cv.text(lx + 28, ly, g.label, kText);
        ly += 24;
    }
    write_png(path, cv);
}

}  // namespace beagle
