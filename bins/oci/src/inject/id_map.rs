//! A user namespace's id mappings, as `/proc/<pid>/uid_map` and `gid_map` give them
//! (user_namespaces(7)): which host id an id inside the namespace is.

/// At most this many lines are read (the kernel allows 340).
const MAX_LINES: usize = 340;

/// One file's mappings: `(inside, host, count)` per line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdMap(Vec<(u32, u32, u32)>);

impl IdMap {
    /// The mappings in `text` (`inside host count` per line). Lines that are not three numbers
    /// are skipped: the kernel writes only such lines.
    pub fn parse(text: &str) -> Self {
        IdMap(
            text.lines()
                .take(MAX_LINES)
                .filter_map(|line| {
                    let mut f = line.split_whitespace().map(|x| x.parse::<u32>().ok());
                    match (f.next()??, f.next()??, f.next()??, f.next()) {
                        (inside, host, count, None) if count > 0 => Some((inside, host, count)),
                        _ => None,
                    }
                })
                .collect(),
        )
    }

    /// The host id that `inside` is, if the namespace maps it.
    pub fn to_host(&self, inside: u32) -> Option<u32> {
        self.0.iter().find_map(|&(first, host, count)| {
            let offset = inside.checked_sub(first)?;
            (offset < count).then(|| host.checked_add(offset)).flatten()
        })
    }
}

/// A container's user namespace: its uid and gid mappings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdMaps {
    /// `uid_map`.
    pub uid: IdMap,
    /// `gid_map`.
    pub gid: IdMap,
}

impl IdMaps {
    /// Whether these are the initial namespace's mappings (every id to itself): the process
    /// has no user namespace of its own.
    pub fn is_initial(&self) -> bool {
        let all = IdMap(vec![(0, 0, u32::MAX)]);
        self.uid == all && self.gid == all
    }

    /// The host uid and gid of the namespace's root, when both are mapped.
    pub fn root(&self) -> Option<(u32, u32)> {
        Some((self.uid.to_host(0)?, self.gid.to_host(0)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_in_their_range_and_nowhere_else() {
        let map = IdMap::parse("         0     100000      65536\n 65536 1 1\nbad line\n");
        assert_eq!(map.to_host(0), Some(100_000));
        assert_eq!(map.to_host(4242), Some(104_242));
        assert_eq!(map.to_host(65_535), Some(165_535));
        assert_eq!(map.to_host(65_536), Some(1));
        assert_eq!(map.to_host(65_537), None);
        assert_eq!(
            IdMap::parse("0 4294967295 2\n").to_host(1),
            None,
            "overflow"
        );
        assert_eq!(
            IdMap::parse("0 0 4294967295\n").to_host(7),
            Some(7),
            "the initial namespace"
        );
        assert_eq!(IdMap::parse("1 2 3 4\n0 0 0\n"), IdMap::default());
    }

    #[test]
    fn the_initial_namespace_is_told_apart() {
        let initial = IdMap::parse("0 0 4294967295\n");
        let maps = |uid: &IdMap| IdMaps {
            uid: uid.clone(),
            gid: initial.clone(),
        };
        assert!(maps(&initial).is_initial());
        assert!(!maps(&IdMap::parse("0 100000 65536\n")).is_initial());
        assert_eq!(
            IdMaps {
                uid: IdMap::parse("0 100000 65536\n"),
                gid: IdMap::parse("0 200000 65536\n"),
            }
            .root(),
            Some((100_000, 200_000))
        );
    }
}
