//! `GetPreferredAllocation`: which of the available ids a container should get.
//!
//! The kubelet asks only when it has a choice, after the topology manager has filtered the
//! candidates, and treats the answer as a hint. The policy, in order of priority:
//!
//! 1. every `must_include` id is in the answer (they belong to the pod's init containers);
//! 2. the answer spans as few NUMA nodes as possible, then as few topology groups;
//! 3. among answers that span equally few, the one that leaves the larger free blocks whole: the
//!    smallest blocks that fit are used up first (best fit), so a later pod that needs a whole
//!    NUMA node or group still finds one. Greedy "first free" or "spread" choices fragment the
//!    node until a two-device pod no longer fits anywhere although two devices are free;
//! 4. replicas of a shared device are spread over distinct physical devices, least used first,
//!    since two replicas on one device give a container no more than one;
//! 5. ties go to the lower id, so the answer is deterministic.
//!
//! Ids are grouped in a tree (NUMA node → topology group → physical device → replica ids) and
//! each level is solved the same way: fill the children the answer already touches, then choose
//! the fewest untouched children that can hold the rest, smallest total first.
//!
//! The module is pure: [`choose`] takes the candidates and returns ids.

/// Where one available id sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The advertised id.
    pub id: &'a str,
    /// The NUMA node of its device, if known.
    pub numa_node: Option<i64>,
    /// A finer topology group inside the NUMA node (e.g. devices behind one switch), if known.
    pub group: Option<&'a str>,
    /// The physical device (differs from `id` for replicas of a shared device).
    pub device: &'a str,
}

/// Above this many children a level is solved greedily instead of by trying every combination.
const EXHAUSTIVE_LIMIT: usize = 12;

/// Picks `size` ids from `available` (deduplicated, in advertised order, containing every
/// `must_include` id). The answer is in advertised order.
pub fn choose<'a>(available: &[Candidate<'a>], must_include: &[&str], size: usize) -> Vec<&'a str> {
    let mut chosen = vec![false; available.len()];
    let mut count = 0;
    for (i, c) in available.iter().enumerate() {
        if count < size && must_include.contains(&c.id) {
            chosen[i] = true;
            count += 1;
        }
    }
    let wanted = size.min(available.len()) - count;
    if wanted > 0 {
        let all: Vec<usize> = (0..available.len()).collect();
        let root = Node::build(available, &all, 0, &chosen);
        root.pick(wanted, &mut chosen);
    }
    available
        .iter()
        .zip(&chosen)
        .filter(|(_, &c)| c)
        .map(|(c, _)| c.id)
        .collect()
}

/// The levels of the tree, top down; below the last come the ids themselves.
const LEVELS: usize = 3;

fn same_key(a: &Candidate<'_>, b: &Candidate<'_>, level: usize) -> bool {
    match level {
        0 => a.numa_node == b.numa_node,
        1 => a.group == b.group,
        _ => a.device == b.device,
    }
}

/// A NUMA node, a group or a physical device, with the ids under it.
#[derive(Debug)]
struct Node {
    /// Level of this node's children: 0 = NUMA nodes, ..., `LEVELS` = ids (a device node).
    level: usize,
    /// Ids under this node that are still free, in advertised order.
    free: Vec<usize>,
    /// Some id under this node is already in the answer.
    touched: bool,
    children: Vec<Node>,
}

impl Node {
    fn build(
        available: &[Candidate<'_>],
        members: &[usize],
        level: usize,
        chosen: &[bool],
    ) -> Self {
        let free: Vec<usize> = members.iter().copied().filter(|&i| !chosen[i]).collect();
        let touched = members.iter().any(|&i| chosen[i]);
        let mut children = Vec::new();
        if level < LEVELS {
            let mut groups: Vec<Vec<usize>> = Vec::new();
            for &i in members {
                match groups
                    .iter_mut()
                    .find(|g| same_key(&available[g[0]], &available[i], level))
                {
                    Some(g) => g.push(i),
                    None => groups.push(vec![i]),
                }
            }
            children = groups
                .iter()
                .map(|g| Self::build(available, g, level + 1, chosen))
                .collect();
        }
        Self {
            level,
            free,
            touched,
            children,
        }
    }

    /// Marks `wanted` more ids under this node as chosen (`wanted <= free`).
    fn pick(&self, wanted: usize, chosen: &mut [bool]) {
        if self.level == LEVELS {
            // A physical device: its lowest free replicas.
            for &i in self.free.iter().take(wanted) {
                chosen[i] = true;
            }
        } else if self.level == LEVELS - 1 {
            self.pick_devices(wanted, chosen);
        } else {
            let (touched, untouched): (Vec<&Node>, Vec<&Node>) = self
                .children
                .iter()
                .filter(|c| !c.free.is_empty())
                .partition(|c| c.touched);
            let in_touched = wanted.min(touched.iter().map(|c| c.free.len()).sum());
            for (child, take) in plan(&touched, in_touched)
                .into_iter()
                .chain(plan(&untouched, wanted - in_touched))
            {
                child.pick(take, chosen);
            }
        }
    }

    /// Spreads `wanted` ids over this group's physical devices, one per device per round:
    /// untouched devices first, then the ones with most free ids, then advertised order.
    fn pick_devices(&self, wanted: usize, chosen: &mut [bool]) {
        let mut devices: Vec<&Node> = self
            .children
            .iter()
            .filter(|c| !c.free.is_empty())
            .collect();
        devices.sort_by_key(|d| (d.touched, std::cmp::Reverse(d.free.len())));
        let mut left = wanted;
        let mut round = 0;
        while left > 0 {
            let before = left;
            for device in &devices {
                if left == 0 {
                    break;
                }
                if let Some(&i) = device.free.get(round) {
                    chosen[i] = true;
                    left -= 1;
                }
            }
            if left == before {
                break;
            }
            round += 1;
        }
    }
}

/// Which children hold `wanted` ids, and how many each: the fewest children, then the smallest
/// total of free ids among them (best fit), then the earliest. Children are filled smallest
/// first, so what is left over stays in one block.
fn plan<'n>(children: &[&'n Node], wanted: usize) -> Vec<(&'n Node, usize)> {
    if wanted == 0 || children.is_empty() {
        return Vec::new();
    }
    let sizes: Vec<usize> = children.iter().map(|c| c.free.len()).collect();
    let mut by_size: Vec<usize> = (0..children.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let mut fewest = 0;
    let mut sum = 0;
    for &i in &by_size {
        if sum >= wanted {
            break;
        }
        sum += sizes[i];
        fewest += 1;
    }
    let mut picked = if children.len() <= EXHAUSTIVE_LIMIT {
        best_combination(&sizes, fewest, wanted)
    } else {
        greedy(&sizes, &by_size, fewest, wanted)
    };
    picked.sort_by_key(|&i| (sizes[i], i));
    let mut left = wanted;
    picked
        .into_iter()
        .map(|i| {
            let take = sizes[i].min(left);
            left -= take;
            (children[i], take)
        })
        .filter(|&(_, take)| take > 0)
        .collect()
}

/// Of all `k`-subsets of `sizes` holding at least `wanted`, the one with the smallest total
/// (the first in lexicographic order on ties).
fn best_combination(sizes: &[usize], k: usize, wanted: usize) -> Vec<usize> {
    let n = sizes.len();
    let mut combo: Vec<usize> = (0..k).collect();
    let mut best: Option<(usize, Vec<usize>)> = None;
    loop {
        let total: usize = combo.iter().map(|&i| sizes[i]).sum();
        if total >= wanted && best.as_ref().is_none_or(|(b, _)| total < *b) {
            best = Some((total, combo.clone()));
        }
        // Next combination in lexicographic order.
        let Some(pos) = (0..k).rev().find(|&p| combo[p] < n - k + p) else {
            break;
        };
        combo[pos] += 1;
        for p in pos + 1..k {
            combo[p] = combo[p - 1] + 1;
        }
    }
    best.map(|(_, c)| c).unwrap_or_default()
}

/// For many children: the `k - 1` largest, then the smallest remaining child that fits the rest.
fn greedy(sizes: &[usize], by_size: &[usize], k: usize, wanted: usize) -> Vec<usize> {
    let mut picked: Vec<usize> = by_size[..k - 1].to_vec();
    let rest = wanted.saturating_sub(picked.iter().map(|&i| sizes[i]).sum());
    let last = by_size[k - 1..]
        .iter()
        .copied()
        .filter(|&i| sizes[i] >= rest)
        .min_by_key(|&i| (sizes[i], i))
        .unwrap_or(by_size[k - 1]);
    picked.push(last);
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `id@numa/group` or `id@numa`; replica ids `dev::n` belong to device `dev`.
    fn candidates(specs: &[&'static str]) -> Vec<Candidate<'static>> {
        specs
            .iter()
            .map(|spec| {
                let (id, topo) = spec.split_once('@').unwrap_or((spec, ""));
                let (numa, group) = topo
                    .split_once('/')
                    .map_or((topo, None), |(n, g)| (n, Some(g)));
                Candidate {
                    id,
                    numa_node: numa.parse().ok(),
                    group,
                    device: id.split_once("::").map_or(id, |(d, _)| d),
                }
            })
            .collect()
    }

    struct Case {
        name: &'static str,
        available: &'static [&'static str],
        must: &'static [&'static str],
        size: usize,
        expect: &'static [&'static str],
    }

    const CASES: &[Case] = &[
        Case {
            name: "no topology: lowest ids",
            available: &["0", "1", "2", "3"],
            must: &[],
            size: 2,
            expect: &["0", "1"],
        },
        Case {
            name: "one device goes where it leaves a whole NUMA node",
            available: &["b0@1", "b1@1", "a1@0"],
            must: &[],
            size: 1,
            expect: &["a1"],
        },
        Case {
            name: "two devices from one NUMA node",
            available: &["a1@0", "b0@1", "b1@1"],
            must: &[],
            size: 2,
            expect: &["b0", "b1"],
        },
        Case {
            name: "fewest NUMA nodes beats order",
            available: &["a0@0", "b0@1", "a1@0", "b1@1", "b2@1"],
            must: &[],
            size: 3,
            expect: &["b0", "b1", "b2"],
        },
        Case {
            name: "two blocks of three rather than four plus three",
            available: &[
                "a0@0", "a1@0", "a2@0", "a3@0", "b0@1", "b1@1", "b2@1", "c0@2", "c1@2", "c2@2",
            ],
            must: &[],
            size: 6,
            expect: &["b0", "b1", "b2", "c0", "c1", "c2"],
        },
        Case {
            name: "must_include pulls the rest onto its NUMA node",
            available: &["a0@0", "a1@0", "b0@1", "b1@1"],
            must: &["b0"],
            size: 2,
            expect: &["b0", "b1"],
        },
        Case {
            name: "must_include node full: best fit for the rest",
            available: &["a0@0", "a1@0", "b0@1", "b1@1", "b2@1", "c0@2"],
            must: &["a0", "a1"],
            size: 3,
            expect: &["a0", "a1", "c0"],
        },
        Case {
            name: "must_include larger than size is cut",
            available: &["0", "1", "2"],
            must: &["2", "1"],
            size: 1,
            expect: &["1"],
        },
        Case {
            name: "everything",
            available: &["a0@0", "b0@1"],
            must: &[],
            size: 2,
            expect: &["a0", "b0"],
        },
        Case {
            name: "topology groups inside a NUMA node: best fit",
            available: &["a0@0/x", "a1@0/x", "a2@0/y", "b0@1/z"],
            must: &[],
            size: 1,
            expect: &["b0"],
        },
        Case {
            name: "topology groups: fewest groups within the NUMA node",
            available: &["a0@0/x", "a1@0/y", "a2@0/y", "a3@0/z"],
            must: &[],
            size: 2,
            expect: &["a1", "a2"],
        },
        Case {
            name: "replicas spread over physical devices",
            available: &["d0::0", "d0::1", "d1::0", "d1::1"],
            must: &[],
            size: 2,
            expect: &["d0::0", "d1::0"],
        },
        Case {
            name: "replicas: least used device first",
            available: &["d0::1", "d1::0", "d1::1"],
            must: &[],
            size: 1,
            expect: &["d1::0"],
        },
        Case {
            name: "replicas: must_include device is not doubled",
            available: &["d0::0", "d0::1", "d1::0", "d1::1"],
            must: &["d0::0"],
            size: 2,
            expect: &["d0::0", "d1::0"],
        },
        Case {
            name: "replicas beyond the device count wrap around",
            available: &["d0::0", "d0::1", "d1::0", "d1::1"],
            must: &[],
            size: 3,
            expect: &["d0::0", "d0::1", "d1::0"],
        },
    ];

    #[test]
    fn table() {
        for case in CASES {
            let available = candidates(case.available);
            let got = choose(&available, case.must, case.size);
            assert_eq!(got, case.expect, "case: {}", case.name);
        }
    }

    /// The seed problem: single-device pods one after another must not leave two free devices
    /// on two different NUMA nodes when a two-device pod comes next.
    #[test]
    fn single_device_pods_leave_room_for_a_pair() {
        let all = candidates(&["a0@0", "a1@0", "b0@1", "b1@1", "c0@2", "c1@2"]);
        let mut free = all.clone();
        for _ in 0..4 {
            let got = choose(&free, &[], 1);
            assert_eq!(got.len(), 1);
            free.retain(|c| c.id != got[0]);
        }
        let pair = choose(&free, &[], 2);
        let numa: Vec<_> = free
            .iter()
            .filter(|c| pair.contains(&c.id))
            .map(|c| c.numa_node)
            .collect();
        assert_eq!(numa.len(), 2);
        assert_eq!(numa[0], numa[1], "pair {pair:?} spans NUMA nodes");
    }

    #[test]
    fn many_groups_fall_back_to_greedy() {
        let specs: Vec<&'static str> = (0..20)
            .flat_map(|n| {
                let count = if n == 7 { 2 } else { 3 };
                (0..count).map(move |d| &*Box::leak(format!("n{n}d{d}@{n}").into_boxed_str()))
            })
            .collect();
        let available = candidates(&specs);
        assert_eq!(choose(&available, &[], 2), ["n7d0", "n7d1"]);
        let five = choose(&available, &[], 5);
        assert_eq!(five.len(), 5);
    }
}
