//! Parquet sink and reader: typed columns from the record's column table, for DuckDB,
//! pandas and Spark across a fleet.
//!
//! Types follow [`Kind`]: `U64` → UInt64, `I64` → Int64, `Text` → dictionary-encoded
//! Utf8, `Timestamp` → Timestamp(ns, "UTC"); an empty cell is a null. File metadata
//! says where and how the rows were recorded ([`FileInfo`]).
//!
//! A Parquet file is readable only through its footer, which a writer normally writes
//! once, at close: a run killed with SIGKILL would leave nothing readable. So row groups
//! are closed at every [`RowWriter::flush`] that finds 2 s passed (the live loop calls it
//! every second), and each is written together with a footer covering every row group
//! so far, in one positional write at the end of the data ([`Staged`]). The next row
//! group overwrites that footer with its data and a new footer. A crash therefore loses
//! at most the rows since the last row group. The footers in between are plain
//! metadata (no page index); the one written at close is the writer's own.

use super::recorder::RowWriter;
use super::time::{format_utc, WallClock};
use super::SinkError;
use crate::record::{IoRecord, Kind, Schema, Value};
use arrow_array::builder::{
    Int64Builder, StringDictionaryBuilder, TimestampNanosecondBuilder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef, TimeUnit};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter, ArrowWriter};
use parquet::basic::{ColumnOrder, Compression};
use parquet::errors::ParquetError;
use parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataWriter, RowGroupMetaData,
};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::SchemaDescPtr;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The key-value metadata key of the run's counters (`Health` as JSON: samples, lost,
/// dropped per CPU, unmatched…), as of the last row group or the end of the run.
pub const HEALTH_KEY: &str = "ntprof.health";
/// Per row group, the sampling rates (1 in N) of its rows: a JSON array of arrays.
pub const SAMPLE_KEY: &str = "ntprof.sample.row_groups";

/// Rows per Arrow batch handed to the Parquet writer.
const BATCH: usize = 4096;
/// A row group is closed (and the file made readable up to it) at least this often.
pub const ROW_GROUP_EVERY: Duration = Duration::from_secs(2);
/// …or when this many rows wait, whichever comes first.
const ROW_GROUP_ROWS: usize = 1 << 20;

/// Where and how a recording was made: written as the file's key-value metadata
/// (keys `ntprof.*`).
#[derive(Debug, Clone, Default)]
pub struct FileInfo {
    pub host: String,
    pub kernel: String,
    pub profile: String,
    /// [`crate::record::Schema::version`] of the profile's column table.
    pub schema_version: u32,
    /// 1 in N I/Os traced (in-kernel sampling); 1 = every I/O.
    pub sample: u32,
    /// realtime − monotonic at the start, ns: `start_ns` + this = `start_time`.
    pub wall_offset_ns: i128,
}

impl FileInfo {
    /// This host (from /proc: no extra dependency) for a run of `profile`.
    pub fn this_host(schema: &Schema, sample: u32, clock: WallClock) -> FileInfo {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        FileInfo {
            host: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            profile: schema.profile.to_string(),
            schema_version: schema.version,
            sample,
            wall_offset_ns: clock.offset_ns(),
        }
    }

    fn key_values(&self) -> Vec<KeyValue> {
        [
            ("ntprof.host", self.host.clone()),
            ("ntprof.kernel", self.kernel.clone()),
            ("ntprof.profile", self.profile.clone()),
            ("ntprof.schema_version", self.schema_version.to_string()),
            ("ntprof.sample_rate", self.sample.to_string()),
            ("ntprof.wall_offset_ns", self.wall_offset_ns.to_string()),
            ("ntprof.version", env!("CARGO_PKG_VERSION").to_string()),
        ]
        .into_iter()
        .map(|(k, v)| KeyValue::new(k.to_string(), v))
        .collect()
    }
}

/// The Arrow type of a column kind.
fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::U64 => DataType::UInt64,
        Kind::I64 => DataType::Int64,
        Kind::Text => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
        Kind::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
    }
}

/// The Arrow schema of a column table: every column nullable (an empty cell is null).
pub fn arrow_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .columns
        .iter()
        .map(|c| Field::new(c.name, data_type(c.kind), true))
        .collect();
    Arc::new(arrow_schema::Schema::new(fields))
}

enum Builder {
    U64(UInt64Builder),
    I64(Int64Builder),
    Text(StringDictionaryBuilder<Int32Type>),
    Time(TimestampNanosecondBuilder),
}

impl Builder {
    fn new(kind: Kind) -> Builder {
        match kind {
            Kind::U64 => Builder::U64(UInt64Builder::new()),
            Kind::I64 => Builder::I64(Int64Builder::new()),
            Kind::Text => Builder::Text(StringDictionaryBuilder::new()),
            Kind::Timestamp => {
                Builder::Time(TimestampNanosecondBuilder::new().with_timezone("UTC"))
            }
        }
    }

    /// Append one cell. A value of another shape than the column's kind is converted
    /// when it says the same thing (a non-negative I64 in a U64 column), else null:
    /// the column table decides the types, not the odd value.
    fn push(&mut self, v: Value<'_>, clock: &WallClock) -> Result<(), ParquetError> {
        match self {
            Builder::U64(b) => b.append_option(match v {
                Value::U64(x) | Value::Hex(x) => Some(x),
                Value::I64(x) => u64::try_from(x).ok(),
                _ => None,
            }),
            Builder::I64(b) => b.append_option(match v {
                Value::I64(x) => Some(x),
                Value::U64(x) => i64::try_from(x).ok(),
                _ => None,
            }),
            Builder::Time(b) => b.append_option(match v {
                Value::Time(t) | Value::U64(t) => i64::try_from(clock.wall_ns(t)).ok(),
                _ => None,
            }),
            Builder::Text(b) => match v {
                Value::Empty => b.append_null(),
                Value::Str(s) => {
                    b.append(s)?;
                }
                other => {
                    b.append(other.to_text())?;
                }
            },
        }
        Ok(())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::U64(b) => Arc::new(b.finish()),
            Builder::I64(b) => Arc::new(b.finish()),
            Builder::Text(b) => Arc::new(b.finish()),
            Builder::Time(b) => Arc::new(b.finish()),
        }
    }
}

/// The file under the Parquet writer. Bytes the writer hands over are held until
/// [`Staged::commit`], which puts them and a new footer where the old footer was.
///
/// Readers find a Parquet file's footer at its end, and a write can be cut anywhere by
/// SIGKILL or a full disk. So a commit never lets the end of the file be anything but a
/// whole footer: it first writes a copy of the current footer past the place the new
/// bytes will end (the file grows, and still ends with the current footer), then
/// writes the row group and the new footer over the old one, and finally cuts the file
/// after the new footer, which is one atomic size change. Cut during the second write,
/// the file reads as before the commit. Only a cut inside the first write (one footer's
/// length) leaves an end readers reject; the old footer is still whole in the file then,
/// and [`ParquetRows::open`] reads up to it.
struct Staged {
    file: File,
    /// End of the committed data (where the next commit writes).
    pos: u64,
    pending: Vec<u8>,
    /// The footer now at the end of the file (empty before the first commit).
    footer: Vec<u8>,
    /// Tests: how many more bytes the file may take before writes fail, to cut a commit
    /// at every point a kill could.
    #[cfg(test)]
    budget: Option<u64>,
}

impl Write for Staged {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Staged {
    fn new(file: File) -> Staged {
        Staged {
            file,
            pos: 0,
            pending: Vec::new(),
            footer: Vec::new(),
            #[cfg(test)]
            budget: None,
        }
    }

    fn write_at(&mut self, buf: &[u8], at: u64) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(left) = self.budget.as_mut() {
            let n = buf.len().min(*left as usize);
            self.file.write_all_at(&buf[..n], at)?;
            *left -= n as u64;
            if n < buf.len() {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            return Ok(());
        }
        self.file.write_all_at(buf, at)
    }

    /// Write the pending bytes and then `footer` (not part of the data: the next commit
    /// overwrites it), and cut the file after them.
    fn commit(&mut self, footer: &[u8]) -> std::io::Result<()> {
        let data = self.pending.len() as u64;
        self.pending.extend_from_slice(footer);
        let end = self.pos + self.pending.len() as u64;
        let result = self.commit_at(end);
        if result.is_err() {
            self.pending.truncate(data as usize);
            return result;
        }
        self.pending.clear();
        self.pos += data;
        self.footer = footer.to_vec();
        Ok(())
    }

    fn commit_at(&mut self, end: u64) -> std::io::Result<()> {
        // The space is reserved first (without changing the file's size), so a full
        // disk fails here, before anything is written. A filesystem that cannot
        // reserve (EOPNOTSUPP) goes without.
        use std::os::fd::AsRawFd;
        let reserve = nix::fcntl::fallocate(
            self.file.as_raw_fd(),
            nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
            self.pos as libc::off_t,
            (end - self.pos + self.footer.len() as u64) as libc::off_t,
        );
        match reserve {
            Ok(()) | Err(nix::errno::Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(e.into()),
        }
        if !self.footer.is_empty() {
            let copy = std::mem::take(&mut self.footer);
            let r = self.write_at(&copy, end);
            self.footer = copy;
            r?;
        }
        let pending = std::mem::take(&mut self.pending);
        let r = self.write_at(&pending, self.pos);
        self.pending = pending;
        r?;
        self.file.set_len(end)
    }
}

/// `record -o FILE.parquet`.
pub struct ParquetSink {
    writer: ArrowWriter<Staged>,
    builders: Vec<Builder>,
    rows_in_batch: usize,
    rows_in_group: usize,
    last_group: Instant,
    clock: WallClock,
    what: String,
    arrow: SchemaRef,
    descr: SchemaDescPtr,
    props: WriterProperties,
    /// `ntprof.health`: the run's counters (JSON) as of the last row group.
    health: Option<String>,
    /// The sampling rates of the rows since the last commit, run-length encoded.
    rates: Vec<(u32, usize)>,
    /// Per row group written: the sampling rates of its rows (one, unless `--max-rate`
    /// changed it within the group), kept as `ntprof.sample.row_groups`.
    group_rates: Vec<Vec<u32>>,
    /// Rows the file holds, readable: those of the row groups its last commit covers.
    kept: u64,
}

impl ParquetSink {
    /// Create the file now, so a bad path fails before any tracing starts.
    pub fn create(
        path: &Path,
        schema: &Schema,
        clock: WallClock,
        info: &FileInfo,
    ) -> Result<ParquetSink, SinkError> {
        let file = File::create(path).map_err(|source| SinkError::Create {
            path: path.to_path_buf(),
            source,
        })?;
        let what = path.display().to_string();
        let perr = |source| SinkError::Parquet {
            what: what.clone(),
            source,
        };
        let arrow = arrow_schema(schema);
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_key_value_metadata(Some(info.key_values()))
            .build();
        // Added here rather than by the writer, so the interim footers carry it too
        // (readers use it to give back the dictionary and timestamp types).
        add_encoded_arrow_schema_to_metadata(&arrow, &mut props);
        let descr = Arc::new(ArrowSchemaConverter::new().convert(&arrow).map_err(perr)?);
        let opts = ArrowWriterOptions::new()
            .with_properties(props.clone())
            .with_skip_arrow_metadata(true);
        let staged = Staged::new(file);
        let writer =
            ArrowWriter::try_new_with_options(staged, arrow.clone(), opts).map_err(perr)?;
        let mut s = ParquetSink {
            writer,
            builders: schema
                .columns
                .iter()
                .map(|c| Builder::new(c.kind))
                .collect(),
            rows_in_batch: 0,
            rows_in_group: 0,
            last_group: Instant::now(),
            clock,
            what,
            arrow,
            descr,
            props,
            health: None,
            rates: Vec::new(),
            group_rates: Vec::new(),
            kept: 0,
        };
        // An empty but readable file from the start (no row group yet).
        s.commit()?;
        Ok(s)
    }

    fn perr(&self, source: ParquetError) -> SinkError {
        SinkError::Parquet {
            what: self.what.clone(),
            source,
        }
    }

    fn write_batch(&mut self) -> Result<(), SinkError> {
        if self.rows_in_batch == 0 {
            return Ok(());
        }
        let cols: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        let batch = RecordBatch::try_new(self.arrow.clone(), cols)
            .map_err(|e| self.perr(ParquetError::from(e)))?;
        self.rows_in_batch = 0;
        self.writer.write(&batch).map_err(|e| self.perr(e))
    }

    /// A footer for the row groups written so far, as the writer's would be without
    /// page indexes.
    fn interim_footer(&self, groups: &[RowGroupMetaData]) -> Result<Vec<u8>, ParquetError> {
        let orders = self
            .descr
            .columns()
            .iter()
            .map(|c| {
                ColumnOrder::TYPE_DEFINED_ORDER(ColumnOrder::sort_order_for_type(
                    c.logical_type_ref(),
                    c.converted_type(),
                    c.physical_type(),
                ))
            })
            .collect();
        let meta = FileMetaData::new(
            self.props.writer_version().as_num(),
            groups.iter().map(|g| g.num_rows()).sum(),
            Some(self.props.created_by().to_string()),
            Some(self.key_values()),
            self.descr.clone(),
            Some(orders),
        );
        let md = ParquetMetaData::new(meta, groups.to_vec());
        let mut buf = Vec::new();
        ParquetMetaDataWriter::new(&mut buf, &md).finish()?;
        Ok(buf)
    }

    /// The file's key-value metadata: where it was recorded, and the counters so far.
    fn key_values(&self) -> Vec<KeyValue> {
        let mut kv = self.props.key_value_metadata().cloned().unwrap_or_default();
        if let Some(h) = &self.health {
            kv.push(KeyValue::new(HEALTH_KEY.to_string(), h.clone()));
        }
        if let Ok(g) = serde_json::to_string(&self.group_rates) {
            kv.push(KeyValue::new(SAMPLE_KEY.to_string(), g));
        }
        kv
    }

    /// The rows since the last commit went into row groups of at most
    /// [`ROW_GROUP_ROWS`] (the writer closes a full one by itself): note each one's
    /// sampling rates.
    fn close_group_rates(&mut self) {
        let mut group: Vec<u32> = Vec::new();
        let mut left = ROW_GROUP_ROWS;
        for (n, mut count) in std::mem::take(&mut self.rates) {
            while count > 0 {
                if !group.contains(&n) {
                    group.push(n);
                }
                let take = count.min(left);
                count -= take;
                left -= take;
                if left == 0 {
                    self.group_rates.push(std::mem::take(&mut group));
                    left = ROW_GROUP_ROWS;
                }
            }
        }
        if !group.is_empty() {
            self.group_rates.push(group);
        }
    }

    /// Close the row group in progress and make the file readable up to it.
    fn commit(&mut self) -> Result<(), SinkError> {
        self.write_batch()?;
        self.close_group_rates();
        self.writer.flush().map_err(|e| self.perr(e))?;
        self.writer
            .sync()
            .map_err(|e| self.perr(ParquetError::External(Box::new(e))))?;
        let footer = self
            .interim_footer(self.writer.flushed_row_groups())
            .map_err(|e| self.perr(e))?;
        self.writer
            .inner_mut()
            .commit(&footer)
            .map_err(|source| SinkError::Write {
                what: self.what.clone(),
                source,
            })?;
        self.kept = (self.writer.flushed_row_groups().iter())
            .map(|g| g.num_rows() as u64)
            .sum();
        self.rows_in_group = 0;
        self.last_group = Instant::now();
        Ok(())
    }
}

impl RowWriter for ParquetSink {
    fn write(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError> {
        match self.rates.last_mut() {
            Some((n, count)) if *n == sample => *count += 1,
            _ => self.rates.push((sample, 1)),
        }
        for (i, b) in self.builders.iter_mut().enumerate() {
            if let Err(e) = b.push(r.value(i), &self.clock) {
                return Err(SinkError::Parquet {
                    what: self.what.clone(),
                    source: e,
                });
            }
        }
        self.rows_in_batch += 1;
        self.rows_in_group += 1;
        if self.rows_in_batch >= BATCH {
            self.write_batch()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        if self.rows_in_group > 0 && self.last_group.elapsed() >= ROW_GROUP_EVERY {
            self.commit()?;
        }
        Ok(())
    }

    fn health(&mut self, health: &super::Health) {
        self.health = serde_json::to_string(health).ok();
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.write_batch()?;
        self.close_group_rates();
        if let Some(h) = &self.health {
            self.writer
                .append_key_value_metadata(KeyValue::new(HEALTH_KEY.to_string(), h.clone()));
        }
        if let Ok(g) = serde_json::to_string(&self.group_rates) {
            self.writer
                .append_key_value_metadata(KeyValue::new(SAMPLE_KEY.to_string(), g));
        }
        let meta = self.writer.finish().map_err(|e| self.perr(e))?;
        // The writer's own footer (with page indexes) is now the pending data.
        self.writer
            .inner_mut()
            .commit(&[])
            .map_err(|source| SinkError::Write {
                what: self.what.clone(),
                source,
            })?;
        self.kept = meta.file_metadata().num_rows() as u64;
        Ok(())
    }

    fn kept(&self) -> Vec<u64> {
        vec![self.kept]
    }
}

/// Whether a file is Parquet (its magic bytes), whatever its name.
pub fn is_parquet(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|f| f.read_exact_at(&mut magic, 0))
        .is_ok()
        && &magic == b"PAR1"
}

/// Rows of a Parquet file as text cells, the same text the CSV of the same run holds
/// (timestamps in the CSV's UTC form), for the readers that share [`crate::record::Row`].
pub struct ParquetRows {
    reader: ParquetRecordBatchReader,
    batch: Option<RecordBatch>,
    next: usize,
    row: u64,
    pub header: Vec<String>,
    /// The file's key-value metadata (see [`FileInfo`]).
    pub meta: Vec<(String, String)>,
    what: String,
    /// Set when the file ended inside a commit (see [`Staged`]) and was read up to the
    /// last whole footer: the length read.
    pub cut: Option<u64>,
    /// The columns a reader takes, once it has said (see [`ParquetRows::only`]): the
    /// others are left empty, whatever their type, as a CSV's extra columns are.
    used: Option<Vec<bool>>,
}

/// The first `len` bytes of a file, as a Parquet reader's input.
#[derive(Clone)]
struct Prefix {
    file: std::sync::Arc<File>,
    len: u64,
}

impl parquet::file::reader::Length for Prefix {
    fn len(&self) -> u64 {
        self.len
    }
}

impl parquet::file::reader::ChunkReader for Prefix {
    type T = <File as parquet::file::reader::ChunkReader>::T;
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        self.file.get_read(start)
    }
    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        if start.saturating_add(length as u64) > self.len {
            return Err(ParquetError::EOF(format!(
                "{length} bytes at {start} are past the footer's end {}",
                self.len
            )));
        }
        self.file.get_bytes(start, length)
    }
}

/// A file whose end is not a footer was cut inside a commit's first write; the footer
/// before it is whole, somewhere before the end (a row group's length back at most).
/// Each `PAR1` from the end back is tried as a footer's end.
fn last_whole_footer(whole: &Prefix) -> Option<(ParquetRecordBatchReaderBuilder<Prefix>, u64)> {
    const CHUNK: u64 = 1 << 20;
    const MAX_BACK: u64 = 512 << 20;
    const MAX_TRIES: usize = 64;
    let mut tries = 0;
    let mut hi = whole.len;
    while hi > 8 && whole.len - hi < MAX_BACK {
        let lo = hi.saturating_sub(CHUNK);
        // 3 bytes of overlap, so a magic across the chunk boundary is seen.
        let end = (hi + 3).min(whole.len);
        let mut buf = vec![0u8; (end - lo) as usize];
        whole.file.read_exact_at(&mut buf, lo).ok()?;
        for i in (0..buf.len().saturating_sub(3)).rev() {
            let at = lo + i as u64;
            if at + 4 > hi + 3 || &buf[i..i + 4] != b"PAR1" || at < 8 {
                continue;
            }
            tries += 1;
            if tries > MAX_TRIES {
                return None;
            }
            let p = Prefix {
                file: whole.file.clone(),
                len: at + 4,
            };
            if let Ok(b) = ParquetRecordBatchReaderBuilder::try_new(p) {
                return Some((b, at + 4));
            }
        }
        hi = lo;
    }
    None
}

impl ParquetRows {
    pub fn open(path: &Path) -> Result<ParquetRows, SinkError> {
        let what = path.display().to_string();
        let perr = |source| SinkError::Parquet {
            what: what.clone(),
            source,
        };
        let file = File::open(path).map_err(|source| SinkError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let whole = Prefix {
            file: std::sync::Arc::new(file),
            len,
        };
        let (b, cut) = match ParquetRecordBatchReaderBuilder::try_new(whole.clone()) {
            Ok(b) => (b, None),
            Err(e) => match last_whole_footer(&whole) {
                Some(b) => (b.0, Some(b.1)),
                None => return Err(perr(e)),
            },
        };
        let meta = b
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .map(|kv| {
                kv.iter()
                    .filter(|k| k.key.starts_with("ntprof."))
                    .map(|k| (k.key.clone(), k.value.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let header = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let reader = b.with_batch_size(BATCH).build().map_err(perr)?;
        Ok(ParquetRows {
            reader,
            batch: None,
            next: 0,
            row: 0,
            header,
            meta,
            what,
            cut,
            used: None,
        })
    }

    /// From now on only these columns (by the file's order) are read: a column added
    /// to the file by another tool (a host name, a flag) is not the reader's concern.
    pub fn only(&mut self, used: Vec<bool>) {
        self.used = Some(used);
    }

    /// The next row's cells into `cells` (reused); its row number (from 1), or `None`
    /// at the end.
    pub fn next_row(&mut self, cells: &mut Vec<String>) -> Result<Option<u64>, SinkError> {
        while self
            .batch
            .as_ref()
            .is_none_or(|b| self.next >= b.num_rows())
        {
            match self.reader.next() {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(SinkError::Parquet {
                        what: self.what.clone(),
                        source: e.into(),
                    })
                }
                Some(Ok(b)) => {
                    self.batch = Some(b);
                    self.next = 0;
                }
            }
        }
        let Some(batch) = self.batch.as_ref() else {
            return Ok(None);
        };
        cells.resize(batch.num_columns(), String::new());
        for (j, ((col, cell), field)) in batch
            .columns()
            .iter()
            .zip(cells.iter_mut())
            .zip(batch.schema_ref().fields())
            .enumerate()
        {
            cell.clear();
            if self
                .used
                .as_ref()
                .is_some_and(|u| !u.get(j).copied().unwrap_or(false))
            {
                continue;
            }
            if let Err(ty) = text(col.as_ref(), self.next, cell) {
                return Err(SinkError::BadReport {
                    path: self.what.clone().into(),
                    reason: format!(
                        "column {} is of type {ty}, which ntprof-perf does not read (it reads integers, text and timestamps: what record writes, and what DuckDB, pyarrow or pandas write when they rewrite it); cast it to one of those",
                        field.name()
                    ),
                });
            }
        }
        self.next += 1;
        self.row += 1;
        Ok(Some(self.row))
    }
}

/// Cell `i` of a column as the CSV writes it (null → empty). `Err` names a type this
/// reader does not know. Beyond the types `record` writes, those a file takes when
/// another tool rewrites it (DuckDB's `COPY … TO`, pyarrow, pandas): narrower
/// integers, timestamps in other units, large or view strings, and floats (a column a
/// spreadsheet round trip made numbers of; a fraction is kept, so that a stage that
/// must be whole ns is refused by name, not rounded).
fn text(a: &dyn Array, i: usize, out: &mut String) -> Result<(), DataType> {
    if a.is_null(i) {
        return Ok(());
    }
    let int = |out: &mut String, v: i64| {
        if v < 0 {
            out.push('-');
        }
        crate::record::push_u64(out, v.unsigned_abs());
    };
    let float = |out: &mut String, v: f64| {
        if v.fract() == 0.0 && v.abs() < 2f64.powi(63) {
            int(out, v as i64);
        } else {
            out.push_str(&v.to_string());
        }
    };
    match a.data_type() {
        DataType::UInt64 => crate::record::push_u64(out, a.as_primitive::<UInt64Type>().value(i)),
        DataType::UInt32 => int(out, a.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt16 => int(out, a.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt8 => int(out, a.as_primitive::<UInt8Type>().value(i).into()),
        DataType::Int64 => int(out, a.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => int(out, a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int16 => int(out, a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int8 => int(out, a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Float64 => float(out, a.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => float(out, a.as_primitive::<Float32Type>().value(i).into()),
        DataType::Timestamp(unit, _) => {
            let (v, ns) = match unit {
                TimeUnit::Nanosecond => (a.as_primitive::<TimestampNanosecondType>().value(i), 1),
                TimeUnit::Microsecond => {
                    (a.as_primitive::<TimestampMicrosecondType>().value(i), 1_000)
                }
                TimeUnit::Millisecond => (
                    a.as_primitive::<TimestampMillisecondType>().value(i),
                    1_000_000,
                ),
                TimeUnit::Second => (
                    a.as_primitive::<TimestampSecondType>().value(i),
                    1_000_000_000,
                ),
            };
            out.push_str(&format_utc(i128::from(v) * ns));
        }
        DataType::Utf8 => out.push_str(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => out.push_str(a.as_string::<i64>().value(i)),
        DataType::Utf8View => out.push_str(a.as_string_view().value(i)),
        DataType::Dictionary(k, v) if **k == DataType::Int32 && **v == DataType::Utf8 => {
            let d = a.as_dictionary::<Int32Type>();
            let key = d.keys().value(i);
            let values = d.values().as_string::<i32>();
            match usize::try_from(key).ok().filter(|&k| k < values.len()) {
                Some(k) => out.push_str(values.value(k)),
                None => return Err(a.data_type().clone()),
            }
        }
        other => return Err(other.clone()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::shared::block_events::Op;
    use crate::profile::{block::record::BlockRecord, shared::device_io::DeviceIo};
    use crate::record::Status;

    /// Cells of the types other tools give a rewritten recording read as `record`
    /// writes them; a fraction stays, for the stage's parser to refuse by name.
    #[test]
    fn cells_of_rewritten_files_read_as_record_writes_them() {
        use arrow_array::{
            Float64Array, Int16Array, LargeStringArray, StringViewArray, TimestampMicrosecondArray,
            TimestampSecondArray, UInt32Array,
        };
        let cell = |a: &dyn Array, i: usize| {
            let mut s = String::new();
            text(a, i, &mut s).map(|()| s)
        };
        let us = TimestampMicrosecondArray::from(vec![1_764_471_633_828_960]);
        assert_eq!(cell(&us, 0).unwrap(), format_utc(1_764_471_633_828_960_000));
        let s = TimestampSecondArray::from(vec![1_764_471_633]);
        assert_eq!(cell(&s, 0).unwrap(), format_utc(1_764_471_633_000_000_000));
        let f = Float64Array::from(vec![Some(179_297.0), Some(1.5), None]);
        assert_eq!(cell(&f, 0).unwrap(), "179297");
        assert_eq!(cell(&f, 1).unwrap(), "1.5");
        assert_eq!(cell(&f, 2).unwrap(), "");
        assert_eq!(cell(&Int16Array::from(vec![-4]), 0).unwrap(), "-4");
        assert_eq!(cell(&UInt32Array::from(vec![4096]), 0).unwrap(), "4096");
        assert_eq!(
            cell(&LargeStringArray::from(vec!["loop1"]), 0).unwrap(),
            "loop1"
        );
        assert_eq!(
            cell(&StringViewArray::from(vec!["read"]), 0).unwrap(),
            "read"
        );
        let b = arrow_array::BooleanArray::from(vec![true]);
        assert_eq!(cell(&b, 0), Err(DataType::Boolean));
    }

    fn row(i: u64) -> BlockRecord {
        BlockRecord {
            io: DeviceIo {
                start_ns: 1_000 + i,
                dev: 7,
                device: "loop0".into(),
                op: Op::Read,
                sector: i * 8,
                bytes: 4096,
                error: 0,
                qd: Some(1),
                candidates: Some(1),
                status: Status::Ok,
            },
            q2d_ns: Some(i),
            d2c_ns: Some(2 * i),
            q2c_ns: Some(3 * i),
        }
    }

    fn rows_in(path: &Path) -> Result<(u64, Option<u64>), SinkError> {
        let mut r = ParquetRows::open(path)?;
        let mut cells = Vec::new();
        let mut n = 0;
        while r.next_row(&mut cells)?.is_some() {
            n += 1;
        }
        Ok((n, r.cut))
    }

    /// A commit cut after any number of bytes (a kill, a full disk) leaves a file that
    /// holds every row committed before it: readable as it is once the copy of the old
    /// footer is whole, and up to the old footer before that.
    #[test]
    fn a_commit_cut_anywhere_keeps_the_rows_committed_before_it() {
        let dir = std::env::temp_dir().join(format!("ntprof-staged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let info = FileInfo {
            host: "h".into(),
            kernel: "k".into(),
            profile: "block".into(),
            schema_version: 1,
            sample: 1,
            wall_offset_ns: 0,
        };
        let schema = row(0).schema();
        let mut cuts = 0;
        let mut checked = 0;
        // Cut points: every byte of the first ones (the copy), then a stride through
        // the row group and the new footer.
        let mut budget = 0u64;
        loop {
            let path = dir.join("cut.parquet");
            let mut s =
                ParquetSink::create(&path, schema, WallClock::with_offset(0), &info).unwrap();
            for i in 0..100 {
                s.write(&row(i), 1).unwrap();
            }
            s.commit().unwrap();
            assert_eq!(rows_in(&path).unwrap(), (100, None));
            let old = s.writer.inner().footer.len() as u64;
            for i in 100..5000 {
                s.write(&row(i), 1).unwrap();
            }
            s.writer.inner_mut().budget = Some(budget);
            let done = s.commit().is_ok();
            let (n, cut) = rows_in(&path)
                .unwrap_or_else(|e| panic!("cut after {budget} bytes: unreadable: {e}"));
            if done {
                assert_eq!((n, cut), (5000, None));
                break;
            }
            assert_eq!(n, 100, "cut after {budget} bytes");
            let data = s.writer.inner().pending.len() as u64;
            assert_eq!(
                cut.is_some(),
                0 < budget && budget < old,
                "cut after {budget} bytes"
            );
            cuts += cut.is_some() as u32;
            checked += 1;
            // Every byte near the edges of the copy, a stride through the rest.
            budget += if budget < 16 || budget + 16 > old && budget < old + 16 {
                1
            } else if budget < old {
                (old / 24).max(1)
            } else {
                (data / 48).max(1)
            };
        }
        assert!(cuts > 0 && checked > cuts, "{cuts} of {checked}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
