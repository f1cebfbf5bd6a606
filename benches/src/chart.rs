//! SVG charts of benchmark results, drawn with the standard library only.
//!
//! Two kinds: [`bar_chart`] (one horizontal bar per contender: the median, a whisker from p10 to
//! p90, the value printed beside it) and [`line_chart`] (how a cost grows: one polyline per
//! series, markers, a legend, axes with ticks). Both return a complete standalone `<svg>`
//! document. Every text is XML-escaped; values that are not finite are never written (a bar
//! with no finite median reads "n/a", a point that is not finite, or not positive on a log axis,
//! is left out).
//!
//! Scales are chosen so that the chart stays readable at a glance: a value axis whose positive
//! values span more than [`LOG_SPAN`] (100×) is drawn on a log scale and its label says so,
//! because a linear axis would squash a 0.1 ms bar beside a 30 ms one to nothing. The x axis of
//! a line chart is logarithmic only when the caller asks for it.

use std::fmt::Write as _;

/// One bar: label, median and the optional spread (p10, p90) drawn as a whisker.
pub type Bar = (String, f64, Option<(f64, f64)>);

/// One growth curve: its name and its (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// Positive values spanning more than this ratio get a log value axis.
pub const LOG_SPAN: f64 = 100.0;

/// Colour-blind-safe palette (Okabe and Ito), without the yellow that is unreadable on white.
const PALETTE: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000",
];

const WIDTH: f64 = 760.0;
/// Where a chart's plot starts, below its title.
const TOP: f64 = 44.0;
const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// Escapes text for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline are not allowed in XML 1.0.
            c if c.is_control() && c != '\t' && c != '\n' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A value as people read it: 3 significant digits, no exponent for everyday magnitudes.
pub fn format_value(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_owned();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1e6 {
        let s = format!("{:.2}", v / 1e6);
        format!("{}M", s.trim_end_matches('0').trim_end_matches('.'))
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.001 {
        // 3 significant digits below 1.
        let decimals = (-a.log10().floor()) as usize + 2;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.2e}")
    }
}

/// A tick label: short, with k/M suffixes for large round numbers.
pub fn format_tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1e6).fract() == 0.0 {
        format!("{}M", v / 1e6)
    } else if a >= 1e4 && (v / 1e3).fract() == 0.0 {
        format!("{}k", v / 1e3)
    } else if a == 0.0 {
        "0".to_owned()
    } else if a >= 1.0 && v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        // The shortest of a few fixed precisions that shows the value exactly enough.
        for decimals in 1..=6 {
            let s = format!("{v:.decimals$}");
            if let Ok(back) = s.parse::<f64>()
                && (back - v).abs() <= a * 1e-6
            {
                return s;
            }
        }
        format!("{v:.2e}")
    }
}

/// The text width in pixels, roughly, for a proportional font of `size`.
fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

/// One axis: maps data values to pixel positions between `lo_px` and `hi_px`.
#[derive(Debug, Clone, Copy)]
struct Scale {
    min: f64,
    max: f64,
    log: bool,
    lo_px: f64,
    hi_px: f64,
}

impl Scale {
    /// Pixel position of `v`, or `None` if it cannot be drawn on this scale.
    fn px(&self, v: f64) -> Option<f64> {
        if !v.is_finite() || (self.log && v <= 0.0) {
            return None;
        }
        let (v, min, max) = if self.log {
            (v.log10(), self.min.log10(), self.max.log10())
        } else {
            (v, self.min, self.max)
        };
        let t = if max > min {
            (v - min) / (max - min)
        } else {
            0.5
        };
        let p = self.lo_px + t * (self.hi_px - self.lo_px);
        p.is_finite().then_some(p)
    }

    /// Tick values inside the domain.
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            log_ticks(self.min, self.max)
        } else {
            linear_ticks(self.min, self.max)
        }
    }
}

/// A "nice" step (1, 2 or 5 times a power of ten) giving about `count` intervals over `span`.
fn nice_step(span: f64, count: f64) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / count;
    let magnitude = 10f64.powf(raw.log10().floor());
    let residual = raw / magnitude;
    let nice = if residual <= 1.0 {
        1.0
    } else if residual <= 2.0 {
        2.0
    } else if residual <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn linear_ticks(min: f64, max: f64) -> Vec<f64> {
    let step = nice_step(max - min, 5.0);
    // Rounding to a decimal below the step removes noise such as 0.6000000000000001.
    let scale = 10f64.powi((1.0 - step.log10().floor()).max(0.0) as i32);
    let mut ticks = Vec::new();
    let mut i = (min / step).ceil();
    while i * step <= max + step * 1e-9 && ticks.len() < 50 {
        let v = (i * step * scale).round() / scale;
        ticks.push(if v == 0.0 { 0.0 } else { v }); // no -0
        i += 1.0;
    }
    ticks
}

fn log_ticks(min: f64, max: f64) -> Vec<f64> {
    let (lo, hi) = (min.log10().floor() as i32, max.log10().ceil() as i32);
    let decades = hi - lo;
    let mults: &[f64] = if decades <= 1 {
        &[1.0, 2.0, 5.0]
    } else if decades <= 3 {
        &[1.0, 3.0]
    } else {
        &[1.0]
    };
    let mut ticks = Vec::new();
    for e in lo..=hi {
        for m in mults {
            let v = m * 10f64.powi(e);
            if v >= min * (1.0 - 1e-9) && v <= max * (1.0 + 1e-9) {
                ticks.push(v);
            }
        }
    }
    ticks
}

/// The domain of a value axis starting at zero (linear) or spanning whole decades (log).
fn value_domain(values: &[f64], allow_log: bool) -> (f64, f64, bool) {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let positive: Vec<f64> = finite.iter().copied().filter(|v| *v > 0.0).collect();
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    if allow_log && !positive.is_empty() && positive.len() == finite.len() {
        let pmin = positive.iter().copied().fold(f64::INFINITY, f64::min);
        let pmax = positive.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if pmax / pmin > LOG_SPAN {
            return (
                10f64.powf(pmin.log10().floor()),
                10f64.powf(pmax.log10().ceil()),
                true,
            );
        }
    }
    if !max.is_finite() {
        return (0.0, 1.0, false);
    }
    let lo = min.min(0.0);
    let hi = if max > lo { max } else { lo + 1.0 };
    let step = nice_step(hi - lo, 5.0);
    let lo = (lo / step).floor() * step;
    let hi = (hi / step).ceil() * step;
    (lo, if hi > lo { hi } else { lo + step }, false)
}

fn svg_open(out: &mut String, width: f64, height: f64, title: &str) {
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"{}\">",
        escape(title)
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{width:.0}\" height=\"{height:.0}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"24\" text-anchor=\"middle\" {FONT} font-size=\"16\" \
         font-weight=\"bold\" fill=\"#222222\">{}</text>",
        width / 2.0,
        escape(title)
    );
}

fn no_data(out: &mut String, width: f64, height: f64) {
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" {FONT} font-size=\"14\" \
         fill=\"#666666\">no data</text>",
        width / 2.0,
        height / 2.0
    );
}

/// The width of the widest of `labels` at 12 px (0 for none).
fn widest<'a>(labels: impl Iterator<Item = &'a str>) -> f64 {
    labels
        .map(|label| text_width(label, 12.0))
        .fold(0.0, f64::max)
}

/// Which axis a grid's ticks are on.
#[derive(Clone, Copy)]
enum Axis {
    /// The horizontal axis: vertical lines, labels below them.
    X,
    /// The vertical axis: horizontal lines, labels left of them.
    Y,
}

/// A light grid line at each of `scale`'s ticks on `axis`, spanning the plot from `from` to
/// `to` across it, with the tick's label beyond the end of the axis.
fn grid(out: &mut String, scale: &Scale, axis: Axis, from: f64, to: f64) {
    for tick in scale.ticks() {
        let Some(at) = scale.px(tick) else {
            continue;
        };
        let ((x1, y1, x2, y2), (label_x, label_y, anchor)) = match axis {
            Axis::X => ((at, from, at, to), (at, to + 16.0, "middle")),
            Axis::Y => ((from, at, to, at), (from - 6.0, at + 4.0, "end")),
        };
        let _ = writeln!(
            out,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" \
             stroke=\"#e3e3e3\" stroke-width=\"1\"/>"
        );
        let _ = writeln!(
            out,
            "<text x=\"{label_x:.1}\" y=\"{label_y:.1}\" text-anchor=\"{anchor}\" {FONT} \
             font-size=\"11\" fill=\"#444444\">{}</text>",
            escape(&format_tick(tick))
        );
    }
}

/// A horizontal axis's title centred at (`x`, `y`), marked when the axis is logarithmic.
fn axis_title(out: &mut String, x: f64, y: f64, title: &str, log: bool) {
    let _ = writeln!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" {FONT} font-size=\"12\" \
         fill=\"#222222\">{}{}</text>",
        escape(title),
        if log { " (log scale)" } else { "" }
    );
}

/// A horizontal bar chart: one bar per `(label, median, Some((p10, p90)))`, in the given order.
///
/// The median is printed beside each bar with `unit`; the optional spread is drawn as a
/// whisker. The value axis is linear from zero, or logarithmic when the values span more than
/// [`LOG_SPAN`].
pub fn bar_chart(title: &str, unit: &str, bars: &[Bar]) -> String {
    const ROW: f64 = 28.0;
    const BAR: f64 = 18.0;
    const BOTTOM: f64 = 52.0;
    let label_w = widest(bars.iter().map(|(label, _, _)| label.as_str())).clamp(60.0, 260.0);
    let left = label_w + 20.0;
    let right = 110.0;
    let height = TOP + ROW * bars.len().max(1) as f64 + BOTTOM;
    let mut out = String::new();
    svg_open(&mut out, WIDTH, height, title);
    if bars.is_empty() {
        no_data(&mut out, WIDTH, height);
        out.push_str("</svg>\n");
        return out;
    }

    let mut values = Vec::new();
    for (_, median, spread) in bars {
        values.push(*median);
        if let Some((lo, hi)) = spread {
            values.extend([*lo, *hi]);
        }
    }
    let (min, max, log) = value_domain(&values, true);
    let scale = Scale {
        min,
        max,
        log,
        lo_px: left,
        hi_px: WIDTH - right,
    };
    let plot_bottom = TOP + ROW * bars.len() as f64;

    // Grid and value axis.
    out.push_str("<g class=\"axis\">\n");
    grid(&mut out, &scale, Axis::X, TOP, plot_bottom);
    let _ = writeln!(
        out,
        "<line x1=\"{left:.1}\" y1=\"{plot_bottom:.1}\" x2=\"{:.1}\" y2=\"{plot_bottom:.1}\" \
         stroke=\"#444444\" stroke-width=\"1\"/>",
        WIDTH - right
    );
    axis_title(
        &mut out,
        (left + WIDTH - right) / 2.0,
        plot_bottom + 38.0,
        unit,
        log,
    );
    out.push_str("</g>\n");

    let base = if log { min } else { 0.0_f64.max(min) };
    for (i, (label, median, spread)) in bars.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let y = TOP + ROW * i as f64 + (ROW - BAR) / 2.0;
        let mid = y + BAR / 2.0;
        let _ = writeln!(out, "<g class=\"bar\">");
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" {FONT} font-size=\"12\" \
             fill=\"#222222\">{}</text>",
            left - 8.0,
            mid + 4.0,
            escape(label)
        );
        let x0 = scale.px(base).unwrap_or(left);
        let mut text_x = left + 4.0;
        if let Some(x1) = scale.px(*median) {
            let (a, b) = if x1 >= x0 { (x0, x1) } else { (x1, x0) };
            let _ = writeln!(
                out,
                "<rect x=\"{a:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR:.1}\" \
                 fill=\"{colour}\" fill-opacity=\"0.85\"><title>{}: {} {}</title></rect>",
                (b - a).max(1.0),
                escape(label),
                escape(&format_value(*median)),
                escape(unit)
            );
            text_x = b + 6.0;
        }
        if let Some((lo, hi)) = spread
            && let (Some(xl), Some(xh)) = (scale.px(*lo), scale.px(*hi))
        {
            let _ = writeln!(
                out,
                "<path d=\"M{xl:.1},{mid:.1}H{xh:.1}M{xl:.1},{:.1}V{:.1}M{xh:.1},{:.1}V{:.1}\" \
                 stroke=\"#222222\" stroke-width=\"1.2\" fill=\"none\"><title>p10 {} – p90 {} \
                 {}</title></path>",
                y + 3.0,
                y + BAR - 3.0,
                y + 3.0,
                y + BAR - 3.0,
                escape(&format_value(*lo)),
                escape(&format_value(*hi)),
                escape(unit)
            );
            text_x = text_x.max(xh + 6.0);
        }
        let _ = writeln!(
            out,
            "<text x=\"{text_x:.1}\" y=\"{:.1}\" {FONT} font-size=\"12\" fill=\"#222222\">{}{}\
             </text>",
            mid + 4.0,
            escape(&format_value(*median)),
            if median.is_finite() {
                format!(" {}", escape(unit))
            } else {
                String::new()
            }
        );
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}

/// A line chart of growth curves: one polyline with markers per `(name, points)` series, a
/// legend, and axes with ticks. `x_label` names the x axis; `unit` the y axis. With `log_x` the
/// x axis is logarithmic (points with x ≤ 0 are left out); the y axis is linear from zero, or
/// logarithmic when the values span more than [`LOG_SPAN`].
pub fn line_chart(
    title: &str,
    x_label: &str,
    unit: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    const HEIGHT: f64 = 440.0;
    const BOTTOM: f64 = 60.0;
    const LEFT: f64 = 78.0;
    // A legend entry is its name after a 36 px sample of the line.
    let legend_w = (widest(series.iter().map(|(name, _)| name.as_str())) + 36.0).clamp(90.0, 240.0);
    let plot_right = WIDTH - legend_w - 16.0;
    let plot_bottom = HEIGHT - BOTTOM;
    let mut out = String::new();
    svg_open(&mut out, WIDTH, HEIGHT, title);

    // Only points drawable on the chosen x scale count for the domains.
    let usable = |x: f64, y: f64| x.is_finite() && y.is_finite() && (!log_x || x > 0.0);
    let (xs, ys): (Vec<f64>, Vec<f64>) = series
        .iter()
        .flat_map(|(_, pts)| pts.iter())
        .filter(|(x, y)| usable(*x, *y))
        .copied()
        .unzip();
    if xs.is_empty() {
        no_data(&mut out, WIDTH, HEIGHT);
        out.push_str("</svg>\n");
        return out;
    }

    let (xmin, xmax) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let x_scale = if log_x {
        let (lo, hi) = (
            10f64.powf(xmin.log10().floor()),
            10f64.powf(xmax.log10().ceil()),
        );
        Scale {
            min: lo,
            max: if hi > lo { hi } else { lo * 10.0 },
            log: true,
            lo_px: LEFT,
            hi_px: plot_right,
        }
    } else {
        let lo = if xmin >= 0.0 && xmin <= (xmax - xmin) {
            0.0
        } else {
            xmin
        };
        let step = nice_step((xmax - lo).max(f64::MIN_POSITIVE), 6.0);
        let (lo, hi) = ((lo / step).floor() * step, (xmax / step).ceil() * step);
        Scale {
            min: lo,
            max: if hi > lo { hi } else { lo + step },
            log: false,
            lo_px: LEFT,
            hi_px: plot_right,
        }
    };
    let (ymin, ymax, log_y) = value_domain(&ys, true);
    let y_scale = Scale {
        min: ymin,
        max: ymax,
        log: log_y,
        lo_px: plot_bottom,
        hi_px: TOP,
    };

    // Grid, ticks and axes.
    out.push_str("<g class=\"axis\">\n");
    grid(&mut out, &x_scale, Axis::X, TOP, plot_bottom);
    grid(&mut out, &y_scale, Axis::Y, LEFT, plot_right);
    let _ = writeln!(
        out,
        "<path d=\"M{LEFT:.1},{TOP:.1}V{plot_bottom:.1}H{plot_right:.1}\" stroke=\"#444444\" \
         stroke-width=\"1\" fill=\"none\"/>"
    );
    axis_title(
        &mut out,
        (LEFT + plot_right) / 2.0,
        plot_bottom + 40.0,
        x_label,
        log_x,
    );
    let y_mid = (TOP + plot_bottom) / 2.0;
    let _ = writeln!(
        out,
        "<text x=\"18\" y=\"{y_mid:.1}\" transform=\"rotate(-90 18 {y_mid:.1})\" \
         text-anchor=\"middle\" {FONT} font-size=\"12\" fill=\"#222222\">{}{}</text>",
        escape(unit),
        if log_y { " (log scale)" } else { "" }
    );
    out.push_str("</g>\n");

    // Series, with value labels when there are few enough points to stay legible.
    let total_points: usize = series.iter().map(|(_, pts)| pts.len()).sum();
    let label_points = total_points <= 30;
    for (i, (name, pts)) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let mut drawn: Vec<(f64, f64, f64, f64)> = pts
            .iter()
            .filter(|(x, y)| usable(*x, *y))
            .filter_map(|(x, y)| Some((x_scale.px(*x)?, y_scale.px(*y)?, *x, *y)))
            .collect();
        drawn.sort_by(|a, b| a.0.total_cmp(&b.0));
        let _ = writeln!(out, "<g class=\"series\">");
        if drawn.len() > 1 {
            let points: Vec<String> = drawn
                .iter()
                .map(|(px, py, _, _)| format!("{px:.1},{py:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                points.join(" ")
            );
        }
        for (px, py, x, y) in &drawn {
            let _ = writeln!(
                out,
                "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3.5\" fill=\"{colour}\"><title>{}: \
                 {} → {} {}</title></circle>",
                escape(name),
                escape(&format_value(*x)),
                escape(&format_value(*y)),
                escape(unit)
            );
            if label_points {
                let _ = writeln!(
                    out,
                    "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" {FONT} \
                     font-size=\"10\" fill=\"{colour}\">{}</text>",
                    py - 7.0,
                    escape(&format_value(*y))
                );
            }
        }
        // Legend entry.
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = plot_right + 16.0;
        let _ = writeln!(
            out,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" \
             stroke-width=\"2\"/>",
            lx + 22.0
        );
        let _ = writeln!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{ly:.1}\" r=\"3.5\" fill=\"{colour}\"/>",
            lx + 11.0
        );
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"12\" fill=\"#222222\">{}</text>",
            lx + 28.0,
            ly + 4.0,
            escape(name)
        );
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small XML checker: every tag closes in order, exactly one root `<svg>`, text and
    /// attribute values hold no raw `<` and only known entities after `&`.
    fn assert_well_formed(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            check_text(&rest[..start]);
            let end = rest[start..].find('>').expect("unclosed tag") + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().expect("closing tag without opening");
                assert_eq!(open, name.trim(), "mismatched closing tag");
            } else {
                let name = tag
                    .split(|c: char| c.is_whitespace() || c == '/')
                    .next()
                    .expect("tag name")
                    .to_owned();
                assert!(!name.is_empty(), "empty tag name in {tag}");
                check_attributes(tag);
                if stack.is_empty() {
                    roots += 1;
                }
                if !tag.ends_with('/') {
                    stack.push(name);
                }
            }
            rest = &rest[end + 1..];
        }
        check_text(rest);
        assert!(stack.is_empty(), "unclosed tags: {stack:?}");
        assert_eq!(roots, 1, "one root element");
        assert!(svg.trim_start().starts_with("<svg "));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches("</svg>").count(), 1);
        assert!(!svg.contains("NaN"), "NaN in output");
        // Non-finite numbers would show up in attribute values (coordinates, sizes).
        for (i, value) in svg.split('"').enumerate() {
            if i % 2 == 1 {
                assert!(
                    !value.contains("inf"),
                    "non-finite attribute value {value:?}"
                );
            }
        }
    }

    fn check_text(text: &str) {
        let mut rest = text;
        while let Some(i) = rest.find('&') {
            let after = &rest[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                    .iter()
                    .any(|e| after.starts_with(e)),
                "raw & in {text:?}"
            );
            rest = &rest[i + 1..];
        }
    }

    fn check_attributes(tag: &str) {
        // Attribute values are between double quotes, which must pair up.
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in {tag}"
        );
        check_text(tag);
    }

    fn bars() -> Vec<Bar> {
        vec![
            ("paddock".into(), 1.2, Some((1.0, 1.5))),
            ("monty".into(), 0.4, None),
            ("cpython -c".into(), 17.0, Some((16.0, 21.0))),
        ]
    }

    #[test]
    fn bar_chart_is_well_formed_and_prints_values() {
        let svg = bar_chart("trivial script", "ms", &bars());
        assert_well_formed(&svg);
        assert!(svg.contains(">1.20 ms<"), "{svg}");
        assert!(svg.contains(">17.0 ms<"));
        assert!(svg.contains(">paddock<"));
        assert!(!svg.contains("log scale"), "17/0.4 < 100: linear");
    }

    #[test]
    fn bar_chart_escapes_text() {
        let svg = bar_chart(
            "a <b> & \"c\"",
            "µs & <x>",
            &[("<script>&'".into(), 3.0, Some((2.0, 4.0)))],
        );
        assert_well_formed(&svg);
        assert!(svg.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
        assert!(svg.contains("&lt;script&gt;&amp;&#39;"));
        assert!(!svg.contains("<script>"));
        assert!(!svg.contains("<b>"));
    }

    #[test]
    fn bar_chart_handles_nan_empty_and_wide_ranges() {
        let svg = bar_chart(
            "odd",
            "ms",
            &[
                (
                    "not a number".into(),
                    f64::NAN,
                    Some((f64::NAN, f64::INFINITY)),
                ),
                ("unbounded".into(), f64::INFINITY, None),
                ("ok".into(), 2.0, None),
            ],
        );
        assert_well_formed(&svg);
        assert!(svg.contains(">n/a<"));

        let svg = bar_chart("empty", "ms", &[]);
        assert_well_formed(&svg);
        assert!(svg.contains("no data"));

        let svg = bar_chart(
            "wide",
            "ms",
            &[("fast".into(), 0.05, None), ("slow".into(), 30.0, None)],
        );
        assert_well_formed(&svg);
        assert!(svg.contains("ms (log scale)"));

        let svg = bar_chart("zeros", "ms", &[("zero".into(), 0.0, Some((0.0, 0.0)))]);
        assert_well_formed(&svg);
        let svg = bar_chart("negative", "ratio", &[("neg".into(), -2.0, None)]);
        assert_well_formed(&svg);
    }

    #[test]
    fn line_chart_is_well_formed_with_legend_and_ticks() {
        let series = vec![
            (
                "paddock".to_owned(),
                vec![(50.0, 2.0), (500.0, 15.0), (5000.0, 140.0)],
            ),
            (
                "monty & co".to_owned(),
                vec![(50.0, 9.0), (500.0, 94.0), (5000.0, 960.0)],
            ),
        ];
        let svg = line_chart("gather <N> calls", "calls", "ms", &series, true);
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("monty &amp; co"));
        assert!(svg.contains("gather &lt;N&gt; calls"));
        assert!(svg.contains("calls (log scale)"));
        assert!(svg.contains("ms (log scale)"), "2..960 spans > 100x");
        assert!(svg.contains(">1k<") || svg.contains(">1000<"));
        assert!(svg.contains(">960<"));
    }

    #[test]
    fn line_chart_drops_undrawable_points() {
        let series = vec![
            (
                "s".to_owned(),
                vec![
                    (0.0, 1.0),
                    (-1.0, 2.0),
                    (f64::NAN, 3.0),
                    (10.0, f64::INFINITY),
                    (100.0, 4.0),
                ],
            ),
            ("empty".to_owned(), vec![]),
        ];
        let svg = line_chart("t", "x", "ms", &series, true);
        assert_well_formed(&svg);
        assert_eq!(
            svg.matches("<circle").count(),
            1 + 2,
            "one point + two legend markers"
        );

        let svg = line_chart("t", "x", "ms", &series, false);
        assert_well_formed(&svg);

        let svg = line_chart("none", "x", "ms", &[], false);
        assert_well_formed(&svg);
        assert!(svg.contains("no data"));

        let one = vec![("one".to_owned(), vec![(1.0, 1.0)])];
        assert_well_formed(&line_chart("single", "x", "ms", &one, false));
        assert_well_formed(&line_chart("single", "x", "ms", &one, true));
    }

    #[test]
    fn linear_line_chart_starts_at_zero() {
        let series = vec![(
            "c".to_owned(),
            vec![(1.0, 100.0), (2.0, 180.0), (8.0, 400.0), (32.0, 420.0)],
        )];
        let svg = line_chart("scripts/s", "concurrency", "scripts/s", &series, false);
        assert_well_formed(&svg);
        assert!(!svg.contains("log scale"));
        assert!(svg.contains(">0<"));
    }

    #[test]
    fn ticks_are_nice() {
        assert_eq!(linear_ticks(0.0, 10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(linear_ticks(0.0, 1.0), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            log_ticks(1.0, 1000.0),
            vec![1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0]
        );
        assert_eq!(format_tick(0.2), "0.2");
        assert_eq!(format_tick(0.30000000000000004), "0.3");
        assert_eq!(format_tick(20000.0), "20k");
        assert_eq!(format_tick(1e6), "1M");
        assert_eq!(format_value(0.1234), "0.123");
        assert_eq!(format_value(0.01234), "0.0123");
        assert_eq!(format_value(12.34), "12.3");
        assert_eq!(format_value(1234.0), "1234");
        assert_eq!(format_value(f64::NAN), "n/a");
    }
}
