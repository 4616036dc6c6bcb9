//! Two rankings merged into one by reciprocal rank fusion: each id scores `1 / (K + rank)` in
//! every ranking it appears in. Ranks, not raw scores, are merged, so bm25 and cosine need no
//! common scale.

/// The usual constant: it keeps the top few of one ranking from outweighing the other.
const K: f32 = 60.0;

/// The ids of `rankings` (each best first) merged, best first, with their fused scores.
pub fn fuse(rankings: &[&[i64]]) -> Vec<(i64, f32)> {
    let mut scores: Vec<(i64, f32)> = Vec::new();
    for ranking in rankings {
        for (rank, id) in ranking.iter().enumerate() {
            let add = 1.0 / (K + rank as f32 + 1.0);
            match scores.iter_mut().find(|(i, _)| i == id) {
                Some((_, score)) => *score += add,
                None => scores.push((*id, add)),
            }
        }
    }
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    scores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_in_both_rankings_wins() {
        let fused = fuse(&[&[1, 2, 3], &[3, 4]]);
        assert_eq!(fused[0].0, 3);
        assert_eq!(fused.len(), 4);
    }
}
