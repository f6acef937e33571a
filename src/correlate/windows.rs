//! Samples of one event that the kernel counted and that never arrived, kept per window
//! of the counts until a correlator pins each on the I/O that lost it (see
//! [`Correlator::on_missing`](super::Correlator::on_missing)).

/// Samples of one event that went missing between two tallies (`after`, `before`], as
/// many as are not yet pinned on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub n: u64,
    pub after: u64,
    pub before: u64,
}

/// The windows of one event with samples not yet pinned on a request, by `before`.
///
/// Kept per window, not as one count: under sustained overflow the rings lose every
/// event of many I/Os, issue and completion alike, and such a completion can never be
/// pinned on a request. Summed with the rest it stayed unaccounted for the whole run,
/// so every issue was taken to have that many requests ahead of it gone from the
/// device (`qd` 1 on every row) and a completion always looked missing wherever one
/// was looked for. A window is given up once every request that could have lost one
/// of its samples has had time to show it (see the block profile's scan).
#[derive(Debug, Clone, Default)]
pub struct Windows(Vec<Window>);

impl Windows {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn total(&self) -> u64 {
        self.0.iter().map(|w| w.n).sum()
    }

    pub fn add(&mut self, n: u64, after: u64, before: u64) {
        if n == 0 {
            return;
        }
        let i = self.0.partition_point(|w| w.before <= before);
        self.0.insert(i, Window { n, after, before });
    }

    /// One sample off the oldest window that `fits`: the window it was in.
    pub fn take(&mut self, fits: impl Fn(&Window) -> bool) -> Option<Window> {
        let i = self.0.iter().position(fits)?;
        let w = self.0[i];
        if w.n == 1 {
            self.0.remove(i);
        } else {
            self.0[i].n -= 1;
        }
        Some(Window { n: 1, ..w })
    }

    /// The samples of the windows closed at `t` or later, and the latest close of
    /// them: what a request issued at `t` can have lost one of.
    pub fn closed_from(&self, t: u64) -> (u64, u64) {
        let k = self.0.partition_point(|w| w.before < t);
        (self.0[k..].iter().map(|w| w.n).sum(), self.horizon())
    }

    /// The latest time a sample not yet pinned can have been stamped (0: none).
    pub fn horizon(&self) -> u64 {
        self.0.last().map_or(0, |w| w.before)
    }

    /// Whether a sample not yet pinned went missing before `t`.
    pub fn before(&self, t: u64) -> bool {
        self.0.iter().any(|w| w.after < t)
    }

    /// Gives up the windows closed before `t`: those.
    pub fn give_up(&mut self, t: u64) -> std::vec::Drain<'_, Window> {
        let k = self.0.partition_point(|w| w.before < t);
        self.0.drain(..k)
    }
}

/// Places where a completion was paired with the first of several I/Os there, one
/// started before a completion went missing, latest last (at most [`Shifted::KEPT`]).
/// Had the first lost its own, each I/O there takes the next one's completion from
/// then on: a hot place (the flushes, all at sector 0; several writers of one block)
/// shifts by one until the run ends, and its last I/O is left with none, however late
/// it started. At the end such an I/O is `dropped`, not `incomplete`.
#[derive(Debug, Clone)]
pub struct Shifted<K>(Vec<K>);

impl<K> Default for Shifted<K> {
    fn default() -> Self {
        Shifted(Vec::new())
    }
}

impl<K: PartialEq> Shifted<K> {
    /// Places kept: each is one place where a completion may have shifted, and a
    /// run's hot places are few.
    pub const KEPT: usize = 64;

    #[cold]
    pub fn note(&mut self, key: K) {
        if let Some(i) = self.0.iter().position(|k| *k == key) {
            self.0.remove(i);
        } else if self.0.len() == Self::KEPT {
            self.0.remove(0);
        }
        self.0.push(key);
    }

    pub fn contains(&self, key: &K) -> bool {
        self.0.contains(key)
    }
}
