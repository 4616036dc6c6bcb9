//! Vectors compared in memory: the nearest ones to a query by dot product (cosine for unit
//! vectors), over every vector of a set, without an approximate index. 100,000 vectors of 384
//! dimensions are scanned in a few milliseconds on one core (see `agentry-bench`'s
//! `retrieval` benchmark).

/// A set of unit vectors of one length, each with its id, stored in one contiguous buffer.
#[derive(Debug, Clone, Default)]
pub struct VectorSet {
    dimensions: usize,
    ids: Vec<i64>,
    values: Vec<f32>,
    /// Where each id's vector is.
    positions: std::collections::HashMap<i64, usize>,
}

impl VectorSet {
    /// An empty set of vectors of `dimensions` values.
    pub fn new(dimensions: usize) -> Self {
        VectorSet {
            dimensions,
            ids: Vec::new(),
            values: Vec::new(),
            positions: Default::default(),
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

    /// Adds a vector; one of another length is ignored (returns false).
    pub fn push(&mut self, id: i64, vector: &[f32]) -> bool {
        if vector.len() != self.dimensions {
            return false;
        }
        if let Some(&at) = self.positions.get(&id) {
            self.values[at * self.dimensions..(at + 1) * self.dimensions].copy_from_slice(vector);
            return true;
        }
        self.positions.insert(id, self.ids.len());
        self.ids.push(id);
        self.values.extend_from_slice(vector);
        true
    }

    /// Removes the vector of `id`, if it is there.
    pub fn remove(&mut self, id: i64) {
        if let Some(at) = self.positions.remove(&id) {
            self.ids.swap_remove(at);
            if let Some(&moved) = self.ids.get(at) {
                self.positions.insert(moved, at);
            }
            let d = self.dimensions;
            let last = self.ids.len() * d;
            if at * d != last {
                let (head, tail) = self.values.split_at_mut(last);
                head[at * d..at * d + d].copy_from_slice(&tail[..d]);
            }
            self.values.truncate(last);
        }
    }

    /// The score of `id`'s vector against `query`, if the set holds it.
    pub fn score(&self, id: i64, query: &[f32]) -> Option<f32> {
        let at = *self.positions.get(&id)?;
        let d = self.dimensions;
        (query.len() == d).then(|| dot(query, &self.values[at * d..at * d + d]))
    }

    /// The `limit` ids nearest to `query`, with their scores, best first.
    pub fn nearest(&self, query: &[f32], limit: usize) -> Vec<(i64, f32)> {
        if query.len() != self.dimensions || self.dimensions == 0 || limit == 0 {
            return Vec::new();
        }
        // The best `limit` so far, worst first, so the bar to enter is `best[0]`.
        let mut best: Vec<(f32, i64)> = Vec::with_capacity(limit + 1);
        for (id, vector) in self.ids.iter().zip(self.values.chunks_exact(self.dimensions)) {
            let score = dot(query, vector);
            if best.len() == limit && score <= best[0].0 {
                continue;
            }
            let at = best.partition_point(|(s, _)| *s < score);
            best.insert(at, (score, *id));
            if best.len() > limit {
                best.remove(0);
            }
        }
        best.into_iter().rev().map(|(score, id)| (id, score)).collect()
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

/// The dot product, in eight lanes so that the compiler vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, a_rest) = a.split_at(a.len() - a.len() % 8);
    let (b8, b_rest) = b.split_at(b.len() - b.len() % 8);
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += x * y;
    }
    sum
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
        assert_eq!(set.score(3, &[1.0, 0.0]), Some(0.6));
        assert_eq!(set.score(1, &[1.0, 0.0]), None);
        set.push(2, &[1.0, 0.0]);
        assert_eq!((set.len(), set.score(2, &[1.0, 0.0])), (2, Some(1.0)));
        assert_eq!(from_bytes(&to_bytes(&[0.25, -1.5])), Some(vec![0.25, -1.5]));
        assert_eq!(dot(&[1.0; 11], &[2.0; 11]), 22.0);
    }
}
