//! Stage 3: turn raw tracepoint records into typed events, through layouts bound from
//! the format files at start-up.
//!
//! No I/O and no allocation per sample: a [`Decoder`] is built once from a tracefs tree
//! for the events a profile needs (each profile brings the layouts of its events, see
//! `profile/<name>/events.rs`), then `decode` is a dispatch on `common_type` plus
//! offset reads. It must not know about perf rings or about correlation.

pub mod field;

pub use field::{FieldReader, IntField, Want};

use crate::tracefs::{EventFormat, Tracefs, TracefsError};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("event {event} has no field `{field}`: this kernel's layout differs from what ntprof-perf knows")]
    MissingField { event: String, field: String },
    #[error("event {event} field `{field}`: expected {expected}, found {found}")]
    FieldKind {
        event: String,
        field: String,
        expected: String,
        found: String,
    },
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("event {event}: ntprof-perf has no decoder for it")]
    Unknown { event: String },
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
}

/// A sample a layout cannot decode. Apart from [`DecodeError`] (whose binding errors
/// carry names and paths) and small, so that the result of decoding each sample stays
/// small on the per-sample path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("event {event}: record of {have} bytes is shorter than its layout ({need} bytes)")]
    Truncated {
        event: &'static str,
        need: usize,
        have: usize,
    },
    #[error("record of {have} bytes is too short to hold common_type")]
    NoHeader { have: usize },
}

impl Malformed {
    /// A record shorter than `need` bytes, the end of a layout's last field, is
    /// truncated; `event` names it (asked only then).
    #[inline(always)]
    pub fn check_len(
        raw: &[u8],
        need: usize,
        event: impl FnOnce() -> &'static str,
    ) -> Result<(), Malformed> {
        if raw.len() < need {
            return Err(Malformed::Truncated {
                event: event(),
                need,
                have: raw.len(),
            });
        }
        Ok(())
    }
}

/// A decoded event of kind `K` with the sample's time (ns on the recording clock) and CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event<K> {
    pub time: u64,
    pub cpu: u32,
    pub kind: K,
}

impl<K: Copy> crate::order::Stamped for Event<K> {
    #[inline]
    fn time(&self) -> u64 {
        self.time
    }
}

/// How one event's raw record becomes a `K`: a layout bound from its format file.
pub trait Layout<K>: Send + Sync {
    fn decode(&self, raw: &[u8]) -> Result<K, Malformed>;

    /// Decode and append the event to `out`, the queue it waits in. One
    /// dynamic call whose body has the layout's decode inlined, so that the event goes
    /// from registers into its place: returned through the stack instead, every sample
    /// paid a store-forwarding stall when the caller copied it on. Always inlined where
    /// the call is static (a decoder of one layout type): the per-sample code then
    /// makes no call at all.
    #[inline(always)]
    fn decode_into(
        &self,
        raw: &[u8],
        time: u64,
        cpu: u32,
        out: &mut Vec<Event<K>>,
    ) -> Result<(), Malformed> {
        let kind = self.decode(raw)?;
        out.push(Event { time, cpu, kind });
        Ok(())
    }
}

impl<K, F: Fn(&[u8]) -> Result<K, Malformed> + Send + Sync> Layout<K> for F {
    // Always: inlined into `decode_into`, the slot's one call (see there).
    #[inline(always)]
    fn decode(&self, raw: &[u8]) -> Result<K, Malformed> {
        self(raw)
    }
}

/// `impl Layout<K> for L` through `L`'s own `decode`, always inlined, so that a layout
/// can be a decoder slot itself (see [`Layout::decode_into`]).
macro_rules! layout_by_decode {
    ($l:ty => $k:ty) => {
        impl $crate::decode::Layout<$k> for $l {
            #[inline(always)]
            fn decode(&self, raw: &[u8]) -> Result<$k, $crate::decode::Malformed> {
                <$l>::decode(self, raw)
            }
        }
    };
}
pub(crate) use layout_by_decode;

/// A layout whose events are wrapped into a profile's event type: a type rather than
/// a closure, so that the whole decode inlines into the slot's one call
/// ([`Layout::decode_into`]).
pub struct Mapped<L, J, W> {
    layout: L,
    wrap: W,
    /// What `layout` decodes to (what `wrap` takes).
    decodes: std::marker::PhantomData<fn() -> J>,
}

impl<L, J, W> Mapped<L, J, W> {
    pub fn new(layout: L, wrap: W) -> Self {
        Mapped {
            layout,
            wrap,
            decodes: std::marker::PhantomData,
        }
    }
}

impl<J, K, L: Layout<J>, W: Fn(J) -> K + Send + Sync> Layout<K> for Mapped<L, J, W> {
    #[inline(always)]
    fn decode(&self, raw: &[u8]) -> Result<K, Malformed> {
        self.layout.decode(raw).map(&self.wrap)
    }
}

/// A profile's `events::layout`: the layout of one of its events by name.
pub type LayoutFn<K> = fn(&EventFormat, &str, &str) -> Result<Box<dyn Layout<K>>, DecodeError>;

/// The layouts of every event a run decodes, dispatched by `common_type`.
///
/// `L` is what a slot holds: by default any layout, boxed behind `dyn Layout<K>`, so
/// that a profile can decode events of different layouts into one enum. A profile
/// whose events all share one layout type names it ([`Decoder::direct`]): the slot is
/// then that type, and its decode inlines into the pipeline's per-sample code with no
/// dynamic call.
pub struct Decoder<K, L: ?Sized = dyn Layout<K>> {
    /// By event id (`common_type`): its layout, `None` for an event not bound. Ids
    /// are small and dense (a few thousand on a whole kernel), so this is tens of KiB
    /// at most, and finding a sample's layout is one load: a scan of the layouts cost
    /// a compare per event bound before it on every sample, and an id → slot number →
    /// layout table one more dependent load.
    by_id: Vec<Option<Arc<L>>>,
    decodes: std::marker::PhantomData<fn() -> K>,
}

impl<K, L: ?Sized> Clone for Decoder<K, L> {
    fn clone(&self) -> Self {
        Decoder {
            by_id: self.by_id.clone(),
            decodes: std::marker::PhantomData,
        }
    }
}

impl<K, L: ?Sized> Default for Decoder<K, L> {
    fn default() -> Self {
        Decoder {
            by_id: Vec::new(),
            decodes: std::marker::PhantomData,
        }
    }
}

/// An event a decoder knows, by name, for opening perf events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundEvent {
    pub name: String,
    pub id: u64,
}

/// What a layout bound from a format file becomes in a decoder whose slots are `S`:
/// boxed for a decoder of any layouts, itself for a decoder of one layout type.
pub trait IntoSlot<S: ?Sized> {
    fn into_slot(self) -> Arc<S>;
}

impl<K, M: Layout<K> + 'static> IntoSlot<dyn Layout<K>> for M {
    fn into_slot(self) -> Arc<dyn Layout<K>> {
        Arc::new(self)
    }
}

impl<M> IntoSlot<M> for M {
    fn into_slot(self) -> Arc<M> {
        Arc::new(self)
    }
}

impl<K> Decoder<K> {
    /// A decoder of any layouts (each slot a `dyn Layout<K>`).
    pub fn new() -> Decoder<K> {
        Decoder::default()
    }

    /// Bind `system:event` with a profile's layout function (`events::layout`).
    pub fn add(
        &mut self,
        tfs: &Tracefs,
        system: &str,
        event: &str,
        layout: LayoutFn<K>,
    ) -> Result<BoundEvent, DecodeError>
    where
        K: 'static,
    {
        self.bind_boxed(tfs, system, event, |f| layout(f, system, event))
    }

    /// Bind `system:event` with a profile's boxed layout (what `events::layout`
    /// returns): the box becomes the slot itself. A box is deliberately not a `Layout`:
    /// wrapped in the slot's own `Arc<dyn>`, every sample paid a second dynamic call,
    /// the box's.
    pub fn bind_boxed(
        &mut self,
        tfs: &Tracefs,
        system: &str,
        event: &str,
        bind: impl FnOnce(&EventFormat) -> Result<Box<dyn Layout<K>>, DecodeError>,
    ) -> Result<BoundEvent, DecodeError> {
        self.put(tfs, system, event, |f| bind(f).map(Arc::from))
    }
}

impl<K, L: Layout<K>> Decoder<K, L> {
    /// A decoder whose every slot is an `L`: each sample's decode is a direct call,
    /// inlined into the code that reads the sample.
    pub fn direct() -> Decoder<K, L> {
        Decoder::default()
    }
}

impl<K, L: Layout<K> + ?Sized> Decoder<K, L> {
    /// Bind `system:event` from `tfs` with the layout `bind` builds from its format.
    pub fn bind<M: IntoSlot<L>>(
        &mut self,
        tfs: &Tracefs,
        system: &str,
        event: &str,
        bind: impl FnOnce(&EventFormat) -> Result<M, DecodeError>,
    ) -> Result<BoundEvent, DecodeError> {
        self.put(tfs, system, event, |f| bind(f).map(IntoSlot::into_slot))
    }

    fn put(
        &mut self,
        tfs: &Tracefs,
        system: &str,
        event: &str,
        bind: impl FnOnce(&EventFormat) -> Result<Arc<L>, DecodeError>,
    ) -> Result<BoundEvent, DecodeError> {
        let fmt = tfs.event(system, event)?;
        let layout = bind(&fmt)?;
        let full = format!("{system}:{event}");
        // `common_type` is a u16 in every record; ids above that cannot be dispatched.
        let id = u16::try_from(fmt.id).map_err(|_| DecodeError::FieldKind {
            event: full.clone(),
            field: "common_type".into(),
            expected: "an event id below 65536".into(),
            found: fmt.id.to_string(),
        })?;
        let at = id as usize;
        if self.by_id.len() <= at {
            self.by_id.resize_with(at + 1, || None);
        }
        self.by_id[at] = Some(layout);
        Ok(BoundEvent {
            name: full,
            id: fmt.id,
        })
    }

    /// Decode one raw record. `Ok(None)` for an event this decoder was not built for.
    #[inline]
    pub fn decode(&self, raw: &[u8], time: u64, cpu: u32) -> Result<Option<Event<K>>, Malformed> {
        let Some(layout) = self.layout(raw)? else {
            return Ok(None);
        };
        let kind = layout.decode(raw)?;
        Ok(Some(Event { time, cpu, kind }))
    }

    /// [`decode`](Self::decode), appending the event to `out`; `Ok(false)` for an
    /// event this decoder was not built for. Always inlined into the per-sample code:
    /// left to itself the compiler called it, a call and a dozen saved registers per
    /// sample.
    #[inline(always)]
    pub fn decode_into(
        &self,
        raw: &[u8],
        time: u64,
        cpu: u32,
        out: &mut Vec<Event<K>>,
    ) -> Result<bool, Malformed> {
        let Some(layout) = self.layout(raw)? else {
            return Ok(false);
        };
        layout.decode_into(raw, time, cpu, out)?;
        Ok(true)
    }

    /// The layout of a raw record's `common_type`; `None` for an event this decoder
    /// was not built for.
    #[inline]
    fn layout(&self, raw: &[u8]) -> Result<Option<&L>, Malformed> {
        let id = match raw {
            [a, b, ..] => u16::from_le_bytes([*a, *b]),
            _ => return Err(Malformed::NoHeader { have: raw.len() }),
        };
        Ok(self.by_id.get(id as usize).and_then(|l| l.as_deref()))
    }
}

/// The error for an event name a profile's events module does not decode.
pub fn unknown(system: &str, event: &str) -> DecodeError {
    DecodeError::Unknown {
        event: format!("{system}:{event}"),
    }
}
