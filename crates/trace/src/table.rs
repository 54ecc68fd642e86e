//! The in-memory trace: a table of requests held as typed columns.
//!
//! Every column has one entry per request, in arrival order. Required columns are plain vectors;
//! optional ones are `Option`s so that a trace without, say, output sizes costs nothing for them.
//! A [`Trace`] is only built through [`Trace::from_columns`], which checks the invariants once so
//! that every consumer can rely on them:
//!
//! - all present columns have the same length;
//! - `arrival_ns` is sorted ascending (ties keep their input order);
//! - list offsets are monotone and end at the values' length.

use crate::TraceError;

/// Strings stored as one byte buffer plus offsets (Arrow's layout), so a million request ids are
/// two allocations, not a million.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StringColumn {
    /// `offsets[i]..offsets[i + 1]` is row `i`'s byte range in `bytes`; `offsets.len() == rows + 1`.
    offsets: Vec<u32>,
    bytes: String,
}

impl StringColumn {
    /// An empty column with room for `rows` rows.
    pub fn with_capacity(rows: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        StringColumn {
            offsets,
            bytes: String::new(),
        }
    }

    /// Appends one row. Panics only if the column exceeds 4 GiB of text, which no trace reaches.
    pub fn push(&mut self, value: &str) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.bytes.push_str(value);
        let end = u32::try_from(self.bytes.len()).expect("string column exceeds 4 GiB");
        self.offsets.push(end);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// True when the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s value. Panics when `i` is out of range, like slice indexing.
    pub fn get(&self, i: usize) -> &str {
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Iterates over the rows in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// A new column holding rows `order[0], order[1], ...` of this one.
    pub fn take(&self, order: &[usize]) -> StringColumn {
        let mut out = StringColumn::with_capacity(order.len());
        for &i in order {
            out.push(self.get(i));
        }
        out
    }
}

/// Variable-length lists of `u64` (prefix-block hashes), stored as values plus offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListColumn {
    /// `offsets[i]..offsets[i + 1]` is row `i`'s range in `values`; `offsets.len() == rows + 1`.
    offsets: Vec<u32>,
    values: Vec<u64>,
}

impl ListColumn {
    /// An empty column with room for `rows` rows.
    pub fn with_capacity(rows: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        ListColumn {
            offsets,
            values: Vec::new(),
        }
    }

    /// Appends one row holding `items`.
    pub fn push(&mut self, items: &[u64]) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.values.extend_from_slice(items);
        let end = u32::try_from(self.values.len()).expect("list column exceeds 2^32 values");
        self.offsets.push(end);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// True when the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s list. Panics when `i` is out of range, like slice indexing.
    pub fn get(&self, i: usize) -> &[u64] {
        &self.values[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// All values of all rows, concatenated.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// The offsets (`rows + 1` entries).
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }

    /// A new column holding rows `order[0], order[1], ...` of this one.
    pub fn take(&self, order: &[usize]) -> ListColumn {
        let mut out = ListColumn::with_capacity(order.len());
        for &i in order {
            out.push(self.get(i));
        }
        out
    }
}

/// Latencies the production system observed for each request, in milliseconds, when the log has
/// them. Replays compare against these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObservedLatencies {
    /// End-to-end latency as the server logged it.
    pub e2e_ms: Option<Vec<f64>>,
    /// Time spent queued before execution.
    pub queue_ms: Option<Vec<f64>>,
    /// Model execution time.
    pub compute_ms: Option<Vec<f64>>,
}

/// The columns of a trace, before validation. Fill what the source has; leave the rest `None`.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    /// Arrival time of each request in nanoseconds from the trace's start (the first request of
    /// a trace read from a log arrives at 0 unless the log says otherwise).
    pub arrival_ns: Vec<u64>,
    /// Input size: prompt tokens for a language model, or a generic size (items, bytes) otherwise.
    pub input_tokens: Vec<u32>,
    /// Output tokens, for generative models.
    pub output_tokens: Option<Vec<u32>>,
    /// Request identifiers from the log.
    pub request_id: Option<StringColumn>,
    /// Model name a request was sent to.
    pub model: Option<StringColumn>,
    /// Priority class: 0 is the most urgent.
    pub class: Option<Vec<u32>>,
    /// Prefix-block hashes (equal leading hashes mean a shareable KV-cache prefix).
    pub prefix_blocks: Option<ListColumn>,
    /// True for requests the log marks as failed; they are kept, not dropped.
    pub failed: Option<Vec<bool>>,
    /// Observed per-request latencies, when the log has them.
    pub observed: ObservedLatencies,
    /// Wall-clock time of `arrival_ns == 0` as Unix nanoseconds, when the source had datetimes.
    pub start_unix_ns: Option<i64>,
}

/// A validated trace: requests in arrival order, as typed columns. See the module docs for the
/// invariants it guarantees.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    cols: Columns,
}

impl Trace {
    /// Validates `cols` and wraps them. Fails when column lengths differ, when arrivals are not
    /// sorted (readers sort before calling this), or when a list column's offsets are malformed.
    pub fn from_columns(cols: Columns) -> Result<Trace, TraceError> {
        let rows = cols.arrival_ns.len();
        let check = |name: &str, len: Option<usize>| match len {
            Some(len) if len != rows => Err(TraceError::ColumnLength {
                column: name.to_string(),
                expected: rows,
                actual: len,
            }),
            _ => Ok(()),
        };
        check("input_tokens", Some(cols.input_tokens.len()))?;
        check("output_tokens", cols.output_tokens.as_ref().map(Vec::len))?;
        check(
            "request_id",
            cols.request_id.as_ref().map(StringColumn::len),
        )?;
        check("model", cols.model.as_ref().map(StringColumn::len))?;
        check("class", cols.class.as_ref().map(Vec::len))?;
        check(
            "prefix_blocks",
            cols.prefix_blocks.as_ref().map(ListColumn::len),
        )?;
        check("failed", cols.failed.as_ref().map(Vec::len))?;
        check("e2e_ms", cols.observed.e2e_ms.as_ref().map(Vec::len))?;
        check("queue_ms", cols.observed.queue_ms.as_ref().map(Vec::len))?;
        check(
            "compute_ms",
            cols.observed.compute_ms.as_ref().map(Vec::len),
        )?;
        if let Some(row) = cols.arrival_ns.windows(2).position(|w| w[0] > w[1]) {
            return Err(TraceError::Unsorted { row: row + 1 });
        }
        Ok(Trace { cols })
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.cols.arrival_ns.len()
    }

    /// True when the trace has no requests.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arrival times in nanoseconds from the trace's start, ascending.
    pub fn arrival_ns(&self) -> &[u64] {
        &self.cols.arrival_ns
    }

    /// Input sizes (prompt tokens, or a generic size).
    pub fn input_tokens(&self) -> &[u32] {
        &self.cols.input_tokens
    }

    /// Output tokens, if the trace has them.
    pub fn output_tokens(&self) -> Option<&[u32]> {
        self.cols.output_tokens.as_deref()
    }

    /// Request ids, if the trace has them.
    pub fn request_id(&self) -> Option<&StringColumn> {
        self.cols.request_id.as_ref()
    }

    /// Model names, if the trace has them.
    pub fn model(&self) -> Option<&StringColumn> {
        self.cols.model.as_ref()
    }

    /// Priority classes (0 most urgent), if the trace has them.
    pub fn class(&self) -> Option<&[u32]> {
        self.cols.class.as_deref()
    }

    /// Prefix-block hashes, if the trace has them.
    pub fn prefix_blocks(&self) -> Option<&ListColumn> {
        self.cols.prefix_blocks.as_ref()
    }

    /// Failed flags, if the trace has them.
    pub fn failed(&self) -> Option<&[bool]> {
        self.cols.failed.as_deref()
    }

    /// Observed latencies from the log.
    pub fn observed(&self) -> &ObservedLatencies {
        &self.cols.observed
    }

    /// Wall-clock time of arrival 0 as Unix nanoseconds, if known.
    pub fn start_unix_ns(&self) -> Option<i64> {
        self.cols.start_unix_ns
    }

    /// Time from the first to the last arrival, in nanoseconds (0 for fewer than two requests).
    pub fn span_ns(&self) -> u64 {
        match (self.cols.arrival_ns.first(), self.cols.arrival_ns.last()) {
            (Some(first), Some(last)) => last - first,
            _ => 0,
        }
    }

    /// Heap bytes held by arrival times and the two size columns (capacity, not length): the
    /// figure the 24-bytes-a-request memory budget is checked against.
    pub fn core_heap_bytes(&self) -> usize {
        self.cols.arrival_ns.capacity() * 8
            + self.cols.input_tokens.capacity() * 4
            + self
                .cols
                .output_tokens
                .as_ref()
                .map_or(0, |v| v.capacity() * 4)
    }

    /// Read-only access to all columns.
    pub fn columns(&self) -> &Columns {
        &self.cols
    }

    /// Gives the columns back, for transforms that build a new trace from this one.
    pub fn into_columns(self) -> Columns {
        self.cols
    }
}

/// A new set of columns holding rows `idx` (ascending) of `c`.
pub(crate) fn take_indices(c: &Columns, idx: &[usize]) -> Columns {
    fn take<T: Copy>(v: &[T], idx: &[usize]) -> Vec<T> {
        idx.iter().map(|&i| v[i]).collect()
    }
    Columns {
        arrival_ns: take(&c.arrival_ns, idx),
        input_tokens: take(&c.input_tokens, idx),
        output_tokens: c.output_tokens.as_deref().map(|v| take(v, idx)),
        request_id: c.request_id.as_ref().map(|s| s.take(idx)),
        model: c.model.as_ref().map(|s| s.take(idx)),
        class: c.class.as_deref().map(|v| take(v, idx)),
        prefix_blocks: c.prefix_blocks.as_ref().map(|l| l.take(idx)),
        failed: c.failed.as_deref().map(|v| take(v, idx)),
        observed: ObservedLatencies {
            e2e_ms: c.observed.e2e_ms.as_deref().map(|v| take(v, idx)),
            queue_ms: c.observed.queue_ms.as_deref().map(|v| take(v, idx)),
            compute_ms: c.observed.compute_ms.as_deref().map(|v| take(v, idx)),
        },
        start_unix_ns: c.start_unix_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(arrivals: &[u64]) -> Columns {
        Columns {
            arrival_ns: arrivals.to_vec(),
            input_tokens: vec![1; arrivals.len()],
            ..Columns::default()
        }
    }

    #[test]
    fn from_columns_rejects_unsorted_arrivals_naming_the_row() {
        let err = Trace::from_columns(columns(&[0, 5, 3])).unwrap_err();
        assert!(
            matches!(err, TraceError::Unsorted { row: 2 }),
            "expected Unsorted at row 2, got {err:?}"
        );
    }

    #[test]
    fn from_columns_rejects_mismatched_column_lengths() {
        let mut cols = columns(&[0, 1]);
        cols.output_tokens = Some(vec![3]);
        let err = Trace::from_columns(cols).unwrap_err();
        assert!(
            matches!(&err, TraceError::ColumnLength { column, expected: 2, actual: 1 } if column == "output_tokens"),
            "got {err:?}"
        );
    }

    #[test]
    fn string_and_list_columns_round_trip_rows() {
        let mut s = StringColumn::with_capacity(2);
        s.push("a");
        s.push("");
        s.push("xyz");
        assert_eq!(s.iter().collect::<Vec<_>>(), vec!["a", "", "xyz"]);
        assert_eq!(s.take(&[2, 0]).iter().collect::<Vec<_>>(), vec!["xyz", "a"]);
        let mut l = ListColumn::with_capacity(2);
        l.push(&[1, 2]);
        l.push(&[]);
        assert_eq!(l.get(0), &[1, 2]);
        assert!(l.get(1).is_empty());
        assert_eq!(l.take(&[1, 0]).get(1), &[1, 2]);
    }
}
