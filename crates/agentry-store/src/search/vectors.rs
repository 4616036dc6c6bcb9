//! Vectors compared in memory: the nearest ones to a query by dot product (cosine for unit
//! vectors), over every vector of a set, without an approximate index. Each vector is kept in
//! 8 bits with its scale (a quarter of the memory of `f32`s, and a quarter of the bytes a scan
//! reads: 100,000 vectors of 384 dimensions are 38 MB, scanned in a few milliseconds on one
//! core; see `agentry-bench`'s `retrieval-bench`). The query is put in 8 bits the same way; a
//! score is then off its exact cosine by about 0.002, far below the gaps that order results.

/// A set of unit vectors of one length, each with its id, stored in one contiguous buffer.
#[derive(Debug, Clone, Default)]
pub struct VectorSet {
    dimensions: usize,
    ids: Vec<i64>,
    /// Each vector's values as `code × scale`, `dimensions` codes a vector.
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// Where each id's vector is.
    positions: std::collections::HashMap<i64, usize>,
}

/// `vector` in 8 bits: its codes, and the scale that turns a code back into a value.
fn quantize(vector: &[f32], codes: &mut [i8]) -> f32 {
    let largest = vector.iter().fold(0f32, |m, v| m.max(v.abs()));
    if largest == 0.0 || !largest.is_finite() {
        codes.fill(0);
        return 0.0;
    }
    let scale = largest / 127.0;
    for (code, v) in codes.iter_mut().zip(vector) {
        *code = (v / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// The dot product of two code vectors, in lanes of 16 so that the compiler multiplies them in
/// 16-bit pairs summed into 32 bits (`pmaddwd`), which every x86-64 has.
#[inline(always)]
fn dot_codes(a: &[i8], b: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let (a16, a_rest) = a.split_at(a.len() - a.len() % 16);
    let (b16, b_rest) = b.split_at(b.len() - b.len() % 16);
    for (x, y) in a16.chunks_exact(16).zip(b16.chunks_exact(16)) {
        for i in 0..16 {
            lanes[i] += i32::from(i16::from(x[i]) * i16::from(y[i]));
        }
    }
    let mut sum: i32 = lanes.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += i32::from(i16::from(*x) * i16::from(*y));
    }
    sum
}

/// Runs `f` compiled for AVX2 where the CPU has it (checked once), else as it is: built for
/// baseline x86-64, the scan would use 128-bit SSE2 only. What `f` calls must be inlined into
/// it for the wider instructions to apply.
#[inline(always)]
fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        return simd.vectorize(f);
    }
    f()
}

/// A query ready to be scored against a set: its codes and scale.
struct Query {
    codes: Vec<i8>,
    scale: f32,
}

impl Query {
    fn new(vector: &[f32]) -> Self {
        let mut codes = vec![0i8; vector.len()];
        let scale = quantize(vector, &mut codes);
        Query { codes, scale }
    }
}

impl VectorSet {
    /// An empty set of vectors of `dimensions` values.
    pub fn new(dimensions: usize) -> Self {
        VectorSet {
            dimensions,
            ..Default::default()
        }
    }

    /// The length of its vectors.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Adds a vector, or replaces the vector of `id`; one of another length is ignored
    /// (returns false).
    pub fn push(&mut self, id: i64, vector: &[f32]) -> bool {
        let d = self.dimensions;
        if vector.len() != d {
            return false;
        }
        let at = match self.positions.get(&id) {
            Some(&at) => at,
            None => {
                let at = self.ids.len();
                self.positions.insert(id, at);
                self.ids.push(id);
                self.codes.resize(self.codes.len() + d, 0);
                self.scales.push(0.0);
                at
            }
        };
        self.scales[at] = quantize(vector, &mut self.codes[at * d..(at + 1) * d]);
        true
    }

    /// Removes the vector of `id`, if it is there.
    pub fn remove(&mut self, id: i64) {
        if let Some(at) = self.positions.remove(&id) {
            self.ids.swap_remove(at);
            self.scales.swap_remove(at);
            if let Some(&moved) = self.ids.get(at) {
                self.positions.insert(moved, at);
            }
            let d = self.dimensions;
            let last = self.ids.len() * d;
            if at * d != last {
                let (head, tail) = self.codes.split_at_mut(last);
                head[at * d..at * d + d].copy_from_slice(&tail[..d]);
            }
            self.codes.truncate(last);
        }
    }

    /// The score of `id`'s vector against `query`, if the set holds it.
    pub fn score(&self, id: i64, query: &[f32]) -> Option<f32> {
        self.scores(&[id], query).pop().map(|(_, score)| score)
    }

    /// The scores against `query` of those of `ids` the set holds, in their order (the query
    /// is put in 8 bits once for all of them).
    pub fn scores(&self, ids: &[i64], query: &[f32]) -> Vec<(i64, f32)> {
        let d = self.dimensions;
        if query.len() != d {
            return Vec::new();
        }
        let query = Query::new(query);
        ids.iter()
            .filter_map(|&id| {
                let at = *self.positions.get(&id)?;
                let dot = dot_codes(&query.codes, &self.codes[at * d..at * d + d]);
                Some((id, dot as f32 * query.scale * self.scales[at]))
            })
            .collect()
    }

    /// The `limit` ids nearest to `query`, with their scores, best first.
    pub fn nearest(&self, query: &[f32], limit: usize) -> Vec<(i64, f32)> {
        if query.len() != self.dimensions || self.dimensions == 0 || limit == 0 {
            return Vec::new();
        }
        let query = Query::new(query);
        // The best `limit` so far, worst first, so the bar to enter is `best[0]`.
        let best = vectorized(
            #[inline(always)]
            || {
                let mut best: Vec<(f32, i64)> = Vec::with_capacity(limit + 1);
                let vectors = self.codes.chunks_exact(self.dimensions).zip(&self.scales);
                for (id, (codes, scale)) in self.ids.iter().zip(vectors) {
                    let score = dot_codes(&query.codes, codes) as f32 * scale;
                    if best.len() == limit && score <= best[0].0 {
                        continue;
                    }
                    let at = best.partition_point(|(s, _)| *s < score);
                    best.insert(at, (score, *id));
                    if best.len() > limit {
                        best.remove(0);
                    }
                }
                best
            },
        );
        best.into_iter()
            .rev()
            .map(|(score, id)| (id, score * query.scale))
            .collect()
    }
}

/// A [`VectorSet`] read from the store, kept while the rows it was read from are unchanged
/// (`S` tells: a count and the newest id). Memories and knowledge bases each keep one.
pub struct VectorCache<S> {
    /// The state the set was read at (`None` before the first read), and the set.
    cached: tokio::sync::Mutex<(Option<S>, VectorSet)>,
}

impl<S> Default for VectorCache<S> {
    fn default() -> Self {
        VectorCache {
            cached: tokio::sync::Mutex::new((None, VectorSet::default())),
        }
    }
}

impl<S: PartialEq> VectorCache<S> {
    /// The set of vectors of `dimensions` values, read again with `load` when the rows are no
    /// longer at `state`.
    pub async fn fresh<E, Fut>(
        &self,
        state: S,
        dimensions: usize,
        load: impl FnOnce() -> Fut,
    ) -> Result<tokio::sync::MappedMutexGuard<'_, VectorSet>, E>
    where
        Fut: std::future::Future<Output = Result<Vec<(i64, Vec<f32>)>, E>>,
    {
        let mut cached = self.cached.lock().await;
        if cached.0.as_ref() != Some(&state) || cached.1.dimensions() != dimensions {
            let mut set = VectorSet::new(dimensions);
            for (id, vector) in load().await? {
                set.push(id, &vector);
            }
            *cached = (Some(state), set);
        }
        Ok(tokio::sync::MutexGuard::map(cached, |(_, set)| set))
    }

    /// Changes the cached set and its state, when it has been read (a writer's own change).
    pub async fn update(&self, change: impl FnOnce(&mut S, &mut VectorSet)) {
        let (state, set) = &mut *self.cached.lock().await;
        if let Some(state) = state {
            change(state, set);
        }
    }
}

/// A vector as stored: little-endian `f32`s.
pub fn to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A stored vector, or `None` when the bytes are not whole `f32`s.
pub fn from_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    bytes.len().is_multiple_of(4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_come_best_first_and_removal_keeps_the_rest() {
        let mut set = VectorSet::new(2);
        set.push(1, &[1.0, 0.0]);
        set.push(2, &[0.0, 1.0]);
        set.push(3, &[0.6, 0.8]);
        assert!(!set.push(4, &[1.0]));
        let found = set.nearest(&[1.0, 0.0], 2);
        assert_eq!(found.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 3]);
        set.remove(1);
        let found = set.nearest(&[1.0, 0.0], 5);
        assert_eq!(found.iter().map(|f| f.0).collect::<Vec<_>>(), [3, 2]);
        let close = |score: Option<f32>, expected: f32| score.is_some_and(|s| (s - expected).abs() < 0.005);
        assert!(close(set.score(3, &[1.0, 0.0]), 0.6));
        assert_eq!(set.score(1, &[1.0, 0.0]), None);
        set.push(2, &[1.0, 0.0]);
        assert_eq!(set.len(), 2);
        assert!(close(set.score(2, &[1.0, 0.0]), 1.0));
        assert_eq!(from_bytes(&to_bytes(&[0.25, -1.5])), Some(vec![0.25, -1.5]));
    }

    /// Scores in 8 bits stay within 0.005 of the exact cosine, over every length the loop
    /// handles (whole lanes and a rest).
    #[test]
    fn eight_bit_scores_are_close_to_the_exact_cosine() {
        let mut state = 7u64;
        let mut unit = |d: usize| {
            let v: Vec<f32> = (0..d)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 2001) as f32 / 1000.0 - 1.0
                })
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        for d in [3, 16, 37, 384] {
            let mut set = VectorSet::new(d);
            let vectors: Vec<Vec<f32>> = (0..50).map(|_| unit(d)).collect();
            for (id, v) in vectors.iter().enumerate() {
                set.push(id as i64, v);
            }
            let query = unit(d);
            for (id, v) in vectors.iter().enumerate() {
                let exact: f32 = v.iter().zip(&query).map(|(a, b)| a * b).sum();
                let score = set.score(id as i64, &query).unwrap();
                assert!((score - exact).abs() < 0.005, "d {d}: {score} vs {exact}");
            }
            let (best, score) = set.nearest(&query, 1)[0];
            let exact: f32 = vectors[best as usize]
                .iter()
                .zip(&query)
                .map(|(a, b)| a * b)
                .sum();
            assert!((score - exact).abs() < 0.005);
        }
    }
}
