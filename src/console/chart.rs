//! An account's balance as a line, drawn by the server as inline SVG (no
//! script, nothing fetched): the balance after each entry of the journal's page,
//! by sequence; past the page, when there are later pages, the balances
//! GetBalance answers at points up to the last sequence assigned (a dashed
//! line: what happened between them is on the later pages); and the balance now,
//! the account's, at the right edge, so the line ends where the figures above
//! it say. The floor and the ceiling are lines across; one far outside what the
//! balance did (more than the balance's own range away) is drawn at the edge it
//! lies beyond, and says so, so that the line stays readable.
//!
//! Coordinates are whole units of the drawing (`viewBox`), worked out in
//! integers, as every amount is.

use std::fmt::Write as _;

use super::view::Amount;

/// The drawing's size, in its own units (the browser scales it to the page),
/// and its plotting area: room on the left for the amounts, below for the
/// sequences.
#[derive(Debug, Clone, Copy)]
pub(super) struct Area {
    pub(super) width: i64,
    pub(super) height: i64,
    pub(super) left: i64,
    pub(super) right: i64,
    pub(super) top: i64,
    pub(super) bottom: i64,
}

const AREA: Area = Area {
    width: 720,
    height: 232,
    left: 104,
    right: 704,
    top: 14,
    bottom: 196,
};
const LEFT: i64 = AREA.left;
const RIGHT: i64 = AREA.right;
const TOP: i64 = AREA.top;
const BOTTOM: i64 = AREA.bottom;
/// Where the last sequence stands, short of the right edge, where "now" does.
const LAST_SEQUENCE: i64 = RIGHT - 48;

/// A balance the line passes through, as its inputs give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Point {
    /// The sequence of the entry it stood after.
    pub(super) sequence: u64,
    pub(super) balance: i64,
}

/// What the chart is drawn from.
#[derive(Debug, Clone)]
pub(super) struct Inputs<'a> {
    pub(super) currency: &'a str,
    /// The page's numbered entries, in journal order.
    pub(super) journal: &'a [Point],
    /// Balances past the page (GetBalance), in order; empty on the last page.
    pub(super) beyond: &'a [Point],
    /// Whether the journal goes on past the page.
    pub(super) more: bool,
    /// The account's balance now.
    pub(super) now: i64,
    /// The floor and the ceiling, where there is one.
    pub(super) floor: Option<i64>,
    pub(super) ceiling: Option<i64>,
}

/// One point drawn: where, and what it stands for.
#[derive(Debug, Clone)]
pub(super) struct Dot {
    pub(super) x: i64,
    pub(super) y: i64,
    /// `journal`, `beyond` or `now`.
    pub(super) kind: &'static str,
    /// The entry's sequence; 0 for now.
    pub(super) sequence: u64,
    pub(super) balance: Amount,
}

/// A line across: a limit, or a value the axis names.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub(super) y: i64,
    /// `floor` or `ceiling`.
    pub(super) kind: &'static str,
    pub(super) label: String,
    /// The limit's minor units.
    pub(super) minor: i64,
}

/// The chart, ready to draw.
#[derive(Debug, Clone)]
pub(super) struct Chart {
    pub(super) area: Area,
    /// The line through the page's entries (SVG path data).
    pub(super) journal: String,
    /// The dashed line past the page, to now; empty on the last page.
    pub(super) beyond: String,
    pub(super) dots: Vec<Dot>,
    pub(super) limits: Vec<Rule>,
    /// The amounts at the top and the bottom of the scale.
    pub(super) top: String,
    pub(super) bottom: String,
    /// The first sequence drawn, at the left.
    pub(super) first: u64,
}

/// The vertical scale: the balances' range, stretched to a limit near enough.
#[derive(Debug, Clone, Copy)]
struct Scale {
    low: i64,
    high: i64,
}

impl Scale {
    fn of(balances: impl Iterator<Item = i64> + Clone, limits: [Option<i64>; 2]) -> Self {
        let low = balances.clone().min().unwrap_or(0);
        let high = balances.max().unwrap_or(0);
        let span = high.saturating_sub(low).max(1);
        let (mut low, mut high) = (low, high);
        for limit in limits.into_iter().flatten() {
            if limit >= low.saturating_sub(span) && limit <= high.saturating_add(span) {
                (low, high) = (low.min(limit), high.max(limit));
            }
        }
        if low == high {
            (low, high) = (low.saturating_sub(1), high.saturating_add(1));
        }
        Self { low, high }
    }

    /// Where `value` is drawn: within the plotting area, at its edge if the
    /// value lies beyond.
    fn y(self, value: i64) -> i64 {
        let value = value.clamp(self.low, self.high);
        let above = i128::from(self.high) - i128::from(value);
        let range = i128::from(self.high) - i128::from(self.low);
        let y = i128::from(TOP) + above * i128::from(BOTTOM - TOP) / range;
        i64::try_from(y).unwrap_or(BOTTOM)
    }

    fn holds(self, value: i64) -> bool {
        (self.low..=self.high).contains(&value)
    }
}

/// Where `sequence` is drawn, between `first` and `last`.
fn x(sequence: u64, first: u64, last: u64) -> i64 {
    if last <= first {
        return LEFT;
    }
    let along = i128::from(sequence.saturating_sub(first));
    let across = i128::from(LAST_SEQUENCE - LEFT);
    let x = i128::from(LEFT) + along * across / i128::from(last - first);
    i64::try_from(x).unwrap_or(LAST_SEQUENCE)
}

/// The chart of `inputs`; `None` when the page has no numbered entry to draw.
pub(super) fn draw(inputs: &Inputs<'_>) -> Option<Chart> {
    let first = inputs.journal.first()?.sequence;
    let last = inputs
        .beyond
        .last()
        .or(inputs.journal.last())
        .map_or(first, |p| p.sequence);
    let balances = inputs
        .journal
        .iter()
        .chain(inputs.beyond)
        .map(|p| p.balance)
        .chain([inputs.now]);
    let scale = Scale::of(balances, [inputs.floor, inputs.ceiling]);
    let dot = |point: &Point, kind| Dot {
        x: x(point.sequence, first, last),
        y: scale.y(point.balance),
        kind,
        sequence: point.sequence,
        balance: Amount::new(point.balance, inputs.currency),
    };
    let mut dots: Vec<Dot> = inputs.journal.iter().map(|p| dot(p, "journal")).collect();
    let on_page = dots.len();
    dots.extend(inputs.beyond.iter().map(|p| dot(p, "beyond")));
    dots.push(Dot {
        x: RIGHT,
        y: scale.y(inputs.now),
        kind: "now",
        sequence: 0,
        balance: Amount::new(inputs.now, inputs.currency),
    });
    // On the last page the line runs on to now unbroken: nothing lies between.
    let solid = if inputs.more { on_page } else { dots.len() };
    let journal = steps(dots.get(..solid).unwrap_or_default());
    let beyond = steps(
        dots.get(solid.saturating_sub(1)..)
            .filter(|_| inputs.more)
            .unwrap_or_default(),
    );
    Some(Chart {
        area: AREA,
        journal,
        beyond,
        limits: limits(inputs, scale),
        top: Amount::new(scale.high, inputs.currency).shown,
        bottom: Amount::new(scale.low, inputs.currency).shown,
        first,
        dots,
    })
}

/// A line through `dots` that holds each balance until the next entry changes
/// it: across, then up or down.
fn steps(dots: &[Dot]) -> String {
    let mut path = String::new();
    for (i, dot) in dots.iter().enumerate() {
        let step = if i == 0 { "M" } else { " H" };
        let turn = if i == 0 { " " } else { " V" };
        // Writing to a String cannot fail.
        let _ = write!(path, "{step}{}{turn}{}", dot.x, dot.y);
    }
    path
}

fn limits(inputs: &Inputs<'_>, scale: Scale) -> Vec<Rule> {
    [
        ("floor", inputs.floor, "below"),
        ("ceiling", inputs.ceiling, "above"),
    ]
    .into_iter()
    .filter_map(|(kind, limit, beyond)| {
        let limit = limit?;
        let amount = Amount::new(limit, inputs.currency).shown;
        let label = if scale.holds(limit) {
            format!("{kind} {amount}")
        } else {
            format!("{kind} {amount} ({beyond})")
        };
        Some(Rule {
            y: scale.y(limit),
            kind,
            label,
            minor: limit,
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(sequence: u64, balance: i64) -> Point {
        Point { sequence, balance }
    }

    fn inputs<'a>(journal: &'a [Point], beyond: &'a [Point], now: i64) -> Inputs<'a> {
        Inputs {
            currency: "USD",
            journal,
            beyond,
            more: !beyond.is_empty(),
            now,
            floor: Some(0),
            ceiling: None,
        }
    }

    #[test]
    fn the_line_ends_at_the_balance_now() {
        let journal = [point(3, 100), point(5, 70), point(9, 0)];
        let chart = draw(&inputs(&journal, &[], 0)).unwrap();
        let now = chart.dots.last().unwrap();
        assert_eq!((now.kind, now.balance.minor, now.x), ("now", 0, RIGHT));
        assert_eq!(chart.dots.len(), 4);
        assert_eq!(chart.dots[0].x, LEFT);
        assert_eq!(chart.dots[2].x, LAST_SEQUENCE);
        assert_eq!(chart.dots[0].y, TOP, "the highest balance at the top");
        assert_eq!(chart.dots[2].y, BOTTOM, "0, the lowest, at the bottom");
        assert_eq!(
            chart.journal,
            format!(
                "M{LEFT} {TOP} H{} V{} H{LAST_SEQUENCE} V{BOTTOM} H{RIGHT} V{BOTTOM}",
                chart.dots[1].x, chart.dots[1].y
            )
        );
        assert!(chart.beyond.is_empty(), "the last page: nothing beyond");
        assert_eq!(
            (chart.top.as_str(), chart.bottom.as_str()),
            ("1.00 USD", "0.00 USD")
        );
        assert_eq!(chart.limits.len(), 1);
        assert_eq!(
            (chart.limits[0].label.as_str(), chart.limits[0].y),
            ("floor 0.00 USD", BOTTOM)
        );
    }

    #[test]
    fn past_the_page_the_line_is_dashed_through_what_get_balance_read() {
        let journal = [point(1, 10), point(2, 20)];
        let beyond = [point(10, 500), point(20, 250)];
        let chart = draw(&inputs(&journal, &beyond, 300)).unwrap();
        let kinds: Vec<&str> = chart.dots.iter().map(|d| d.kind).collect();
        assert_eq!(kinds, ["journal", "journal", "beyond", "beyond", "now"]);
        assert_eq!(chart.dots[3].x, LAST_SEQUENCE, "the last sequence read");
        assert_eq!(chart.dots[2].y, TOP, "500, the highest");
        assert!(chart.journal.matches('H').count() == 1, "{}", chart.journal);
        assert!(
            chart
                .beyond
                .starts_with(&format!("M{} {}", chart.dots[1].x, chart.dots[1].y)),
            "from the page's last entry: {}",
            chart.beyond
        );
        assert!(
            chart
                .beyond
                .ends_with(&format!("H{RIGHT} V{}", chart.dots[4].y))
        );
        assert_eq!(chart.dots[4].balance.shown, "3.00 USD");
    }

    #[test]
    fn a_limit_far_past_the_balances_is_drawn_at_its_edge() {
        let journal = [point(1, 1_000), point(2, 2_000)];
        let near = Inputs {
            floor: Some(500),
            ceiling: Some(2_500),
            ..inputs(&journal, &[], 2_000)
        };
        let chart = draw(&near).unwrap();
        let ys: Vec<(i64, &str)> = chart
            .limits
            .iter()
            .map(|l| (l.y, l.label.as_str()))
            .collect();
        assert_eq!(ys, [(BOTTOM, "floor 5.00 USD"), (TOP, "ceiling 25.00 USD")]);
        let far = Inputs {
            floor: Some(-1_000_000),
            ceiling: Some(250_000_000),
            ..near
        };
        let chart = draw(&far).unwrap();
        let ys: Vec<(i64, i64, &str)> = chart
            .limits
            .iter()
            .map(|l| (l.y, l.minor, l.label.as_str()))
            .collect();
        assert_eq!(
            ys,
            [
                (BOTTOM, -1_000_000, "floor -10000.00 USD (below)"),
                (TOP, 250_000_000, "ceiling 2500000.00 USD (above)")
            ]
        );
        assert_eq!(chart.dots[0].y, BOTTOM, "the balances keep the height");
        assert_eq!(chart.dots[1].y, TOP);
    }

    #[test]
    fn the_extremes_and_a_flat_line_are_drawn_within_the_area() {
        let journal = [point(u64::MAX - 1, i64::MIN), point(u64::MAX, i64::MAX)];
        let chart = draw(&inputs(&journal, &[], i64::MAX)).unwrap();
        for dot in &chart.dots {
            assert!((LEFT..=RIGHT).contains(&dot.x) && (TOP..=BOTTOM).contains(&dot.y));
        }
        let flat = [point(7, 42)];
        let chart = draw(&inputs(&flat, &[], 42)).unwrap();
        assert_eq!(chart.dots[0].x, LEFT);
        assert_eq!(chart.dots[0].y, chart.dots[1].y);
        assert!(draw(&inputs(&[], &[], 42)).is_none(), "no entry: no chart");
    }
}
