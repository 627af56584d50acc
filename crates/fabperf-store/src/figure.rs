//! Which of a finished cell's records stand for it: one rule for the run
//! log's headline, the report's rows and the mesh summary.
//!
//! A cell of concurrent flows (incast, bisection) stands by its aggregates,
//! one per direction; any other cell by its totals. Its streams and its
//! single flows never stand for it. Per data direction, a `bidir` total
//! (the sum of both directions) gives way to the cell's `forward` and
//! `reverse` totals when it has them.

use crate::Role;

/// What the rule reads of a record: its role in the cell and the
/// direction its data moved in.
pub trait CellRecord {
    fn role(&self) -> Role;
    fn direction(&self) -> Option<&str>;
}

impl CellRecord for crate::Measurement {
    fn role(&self) -> Role {
        self.role
    }
    fn direction(&self) -> Option<&str> {
        self.record.direction.as_deref()
    }
}

impl CellRecord for crate::StoredMeasurement {
    fn role(&self) -> Role {
        self.role
    }
    fn direction(&self) -> Option<&str> {
        self.direction.as_deref()
    }
}

/// The records that stand for a cell, in stored order: its aggregates if
/// it has any, else its totals.
pub fn standing<T: CellRecord>(ms: &[T]) -> Vec<&T> {
    let want = if ms.iter().any(|m| m.role() == Role::Aggregate) {
        Role::Aggregate
    } else {
        Role::Total
    };
    ms.iter().filter(|m| m.role() == want).collect()
}

/// The one record that stands for a cell: the first of [`standing`] (a
/// bidirectional test's `bidir` total, which comes before its directions).
pub fn main_record<T: CellRecord>(ms: &[T]) -> Option<&T> {
    standing(ms).into_iter().next()
}

/// A cell's figure per data direction, as (reversed, figure): `false` for
/// data from the driving agent (`forward`, or a record that names no
/// direction), `true` for data towards it (`reverse`). Each direction's
/// figure is the first standing record of that direction that has one; a
/// `bidir` total counts as forward only when the cell has no `forward` or
/// `reverse` record.
pub fn per_direction<T: CellRecord>(
    ms: &[T],
    figure: impl Fn(&T) -> Option<f64>,
) -> Vec<(bool, f64)> {
    let stand = standing(ms);
    let directed = stand
        .iter()
        .any(|m| matches!(m.direction(), Some("forward" | "reverse")));
    let mut out: Vec<(bool, f64)> = Vec::new();
    for m in stand {
        let reversed = match m.direction() {
            Some("reverse") => true,
            Some("bidir") if directed => continue,
            _ => false,
        };
        if out.iter().any(|(r, _)| *r == reversed) {
            continue;
        }
        if let Some(v) = figure(m) {
            out.push((reversed, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R(Role, Option<&'static str>, Option<f64>);
    impl CellRecord for R {
        fn role(&self) -> Role {
            self.0
        }
        fn direction(&self) -> Option<&str> {
            self.1
        }
    }
    fn fig(r: &R) -> Option<f64> {
        r.2
    }

    #[test]
    fn a_single_flow_cell_stands_by_its_totals() {
        let ms = [
            R(Role::Total, Some("bidir"), Some(3.0)),
            R(Role::Total, Some("forward"), Some(1.0)),
            R(Role::Total, Some("reverse"), Some(2.0)),
            R(Role::Stream, Some("forward"), Some(0.5)),
        ];
        assert_eq!(main_record(&ms).map(|m| m.2), Some(Some(3.0)));
        assert_eq!(standing(&ms).len(), 3);
        // Per direction, the bidir sum gives way to the directions.
        assert_eq!(per_direction(&ms, fig), vec![(false, 1.0), (true, 2.0)]);
        // Alone, a bidir total is the forward figure.
        let only = [R(Role::Total, Some("bidir"), Some(3.0))];
        assert_eq!(per_direction(&only, fig), vec![(false, 3.0)]);
    }

    #[test]
    fn concurrent_flows_stand_by_their_aggregates() {
        let ms = [
            R(Role::Flow, Some("forward"), Some(1.0)),
            R(Role::Flow, Some("reverse"), Some(1.5)),
            R(Role::Aggregate, Some("forward"), Some(9.0)),
            R(Role::Aggregate, Some("reverse"), Some(8.0)),
        ];
        assert_eq!(main_record(&ms).map(|m| m.2), Some(Some(9.0)));
        assert_eq!(standing(&ms).len(), 2);
        assert_eq!(per_direction(&ms, fig), vec![(false, 9.0), (true, 8.0)]);
        // Flows alone (a cell that failed its overlap rule) stand for nothing.
        assert!(main_record(&ms[..2]).is_none());
    }

    #[test]
    fn a_direction_takes_its_first_record_with_a_figure() {
        let ms = [
            R(Role::Total, None, None),
            R(Role::Total, None, Some(4.0)),
            R(Role::Total, None, Some(5.0)),
        ];
        assert_eq!(per_direction(&ms, fig), vec![(false, 4.0)]);
        assert!(per_direction(&ms[..1], fig).is_empty());
    }
}
