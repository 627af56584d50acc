//! Who tests whom, and when: round-robin rounds of disjoint pairs, incast
//! groups, bisection splits.

/// Rounds of disjoint unordered pairs covering every pair of `n` nodes
/// exactly once (the circle method): n−1 rounds for even n, n rounds for odd
/// n (each node sits out one round, the "bye"). Pairs are node indices
/// `(a, b)`; orientation alternates so that each node sends in about half of
/// its pairs.
pub fn round_robin(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // With an odd count, a phantom node `n` stands for the bye.
    let m = if n.is_multiple_of(2) { n } else { n + 1 };
    let mut ring: Vec<usize> = (0..m).collect();
    let mut rounds = Vec::with_capacity(m - 1);
    for _ in 0..m - 1 {
        let mut round = Vec::with_capacity(m / 2);
        for i in 0..m / 2 {
            let a = ring[i];
            let b = ring[m - 1 - i];
            if a >= n || b >= n {
                continue;
            }
            round.push(orient(a, b, n));
        }
        rounds.push(round);
        // Keep ring[0] fixed, rotate the rest by one.
        let last = ring.pop().expect("m >= 2");
        ring.insert(1, last);
    }
    rounds
}

/// Who sends in the pair {a, b}: a regular tournament, so that every node
/// sends in half of its pairs (±1). Among the first odd number of nodes `i`
/// sends to `j` when `(j − i) mod k` is at most `(k − 1) / 2`; with an even
/// count, the last node sends to the even-numbered others.
fn orient(a: usize, b: usize, n: usize) -> (usize, usize) {
    let k = if n % 2 == 1 { n } else { n - 1 };
    if a == k || b == k {
        let (last, other) = if a == k { (a, b) } else { (b, a) };
        return if other % 2 == 0 {
            (last, other)
        } else {
            (other, last)
        };
    }
    if (b + k - a) % k <= (k - 1) / 2 {
        (a, b)
    } else {
        (b, a)
    }
}

/// Both directions of every pair: the unordered rounds, then the same rounds
/// reversed (2(n−1) rounds for even n).
pub fn round_robin_ordered(n: usize) -> Vec<Vec<(usize, usize)>> {
    let fwd = round_robin(n);
    let rev: Vec<Vec<(usize, usize)>> = fwd
        .iter()
        .map(|r| r.iter().map(|&(a, b)| (b, a)).collect())
        .collect();
    fwd.into_iter().chain(rev).collect()
}

/// Batches of items that share no node: each item names the nodes it
/// occupies (node identities, not agent names: a node's host and pod agents
/// share its NIC); returns each item's batch index, greedily in item order,
/// so that items of one batch can run at the same time without depressing
/// each other or colliding on an agent.
pub fn disjoint_batches(items: &[Vec<String>]) -> Vec<usize> {
    let mut busy: Vec<std::collections::BTreeSet<&str>> = Vec::new();
    items
        .iter()
        .map(|nodes| {
            let free = |b: &std::collections::BTreeSet<&str>| {
                nodes.iter().all(|n| !b.contains(n.as_str()))
            };
            let i = match busy.iter().position(free) {
                Some(i) => i,
                None => {
                    busy.push(Default::default());
                    busy.len() - 1
                }
            };
            busy[i].extend(nodes.iter().map(String::as_str));
            i
        })
        .collect()
}

/// Split `n` nodes in two halves at random (seeded), and pair the halves:
/// flows (sender, receiver) from the first half to the second. With an odd
/// count one node sits the split out. The shuffle is a ChaCha8 stream seeded
/// from the plan's seed and the split number, so the same plan always makes
/// the same splits.
pub fn bisection(n: usize, seed: u64, split: u32) -> Vec<(usize, usize)> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
        seed ^ (split as u64).wrapping_mul(0xa076_1d64_78bd_642f),
    );
    idx.shuffle(&mut rng);
    let half = n / 2;
    (0..half).map(|i| (idx[i], idx[half + i])).collect()
}

/// Every other node sends to `receiver`.
pub fn incast(n: usize, receiver: usize) -> Vec<(usize, usize)> {
    (0..n)
        .filter(|&s| s != receiver)
        .map(|s| (s, receiver))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn check_rounds(n: usize, rounds: &[Vec<(usize, usize)>], ordered: bool) {
        let mut seen = HashSet::new();
        for (ri, r) in rounds.iter().enumerate() {
            let mut busy = HashSet::new();
            for &(a, b) in r {
                assert!(
                    a < n && b < n && a != b,
                    "n={n} round {ri}: bad pair ({a},{b})"
                );
                assert!(busy.insert(a), "n={n} round {ri}: node {a} twice");
                assert!(busy.insert(b), "n={n} round {ri}: node {b} twice");
                let key = if ordered {
                    (a, b)
                } else {
                    (a.min(b), a.max(b))
                };
                assert!(seen.insert(key), "n={n}: pair {key:?} twice");
            }
            // A round is full: at most one node idle (odd n).
            assert!(
                busy.len() >= n - (n % 2),
                "n={n} round {ri}: only {} busy",
                busy.len()
            );
        }
        let want = if ordered {
            n * (n - 1)
        } else {
            n * (n - 1) / 2
        };
        assert_eq!(seen.len(), want, "n={n}: every pair exactly once");
    }

    #[test]
    fn round_robin_covers_every_pair_once_without_overlap() {
        for n in 2..=64 {
            let r = round_robin(n);
            assert_eq!(r.len(), if n % 2 == 0 { n - 1 } else { n }, "n={n}");
            check_rounds(n, &r, false);
            check_rounds(n, &round_robin_ordered(n), true);
        }
        for n in [127, 128, 255, 256, 511, 512] {
            check_rounds(n, &round_robin(n), false);
        }
        assert!(round_robin(0).is_empty());
        assert!(round_robin(1).is_empty());
    }

    #[test]
    fn round_robin_alternates_senders() {
        for n in [3usize, 5, 7] {
            let mut sends = vec![0usize; n];
            for r in round_robin(n) {
                for (a, _) in r {
                    sends[a] += 1;
                }
            }
            assert!(sends.iter().all(|&s| s == (n - 1) / 2), "n={n}: {sends:?}");
        }
        let n = 8;
        let mut sends = vec![0usize; n];
        for r in round_robin(n) {
            for (a, _) in r {
                sends[a] += 1;
            }
        }
        for (i, s) in sends.iter().enumerate() {
            assert!((3..=4).contains(s), "node {i} sends in {s} of 7 pairs");
        }
    }

    #[test]
    fn bisection_is_a_deterministic_perfect_matching() {
        for n in 2..40 {
            for split in 0..5 {
                let f = bisection(n, 7, split);
                assert_eq!(f, bisection(n, 7, split), "deterministic");
                assert_eq!(f.len(), n / 2);
                let mut seen = HashSet::new();
                for (a, b) in f {
                    assert!(seen.insert(a) && seen.insert(b));
                }
            }
        }
        // Different splits differ (for a large enough n).
        assert_ne!(bisection(16, 7, 0), bisection(16, 7, 1));
        assert_ne!(bisection(16, 7, 0), bisection(16, 8, 0));
    }

    #[test]
    fn bisection_splits_are_pinned_for_a_seed() {
        // A stored run names its splits by seed: the same seed must give the
        // same pairs in every build (the locked rand/rand_chacha versions).
        assert_eq!(bisection(8, 7, 0), vec![(0, 4), (7, 1), (5, 6), (2, 3)]);
    }

    #[test]
    fn incast_sends_from_everyone_else() {
        assert_eq!(incast(4, 2), vec![(0, 2), (1, 2), (3, 2)]);
        assert!(incast(1, 0).is_empty());
    }

    #[test]
    fn disjoint_batches_never_share_a_node() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // One pair at two sizes, the same node on two paths, and an
        // unrelated pair that fits beside the first.
        let items = vec![
            v(&["n1", "n3"]),
            v(&["n1", "n3"]),
            v(&["n3", "n2"]),
            v(&["n2", "n4"]),
        ];
        let b = disjoint_batches(&items);
        assert_eq!(b, vec![0, 1, 2, 0]);
        for (i, x) in items.iter().enumerate() {
            for (j, y) in items.iter().enumerate().skip(i + 1) {
                if b[i] == b[j] {
                    assert!(x.iter().all(|n| !y.contains(n)), "{x:?} and {y:?}");
                }
            }
        }
        assert!(disjoint_batches(&[]).is_empty());
    }
}
