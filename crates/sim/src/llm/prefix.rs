//! Prefix caching: which KV blocks of a prompt another request may already have computed.
//!
//! A trace's `prefix_blocks` (Mooncake's `hash_ids`) name the prompt's blocks of
//! `prefix_block_tokens` tokens each (512 in Mooncake); equal leading ids mean an equal prefix.
//! A KV block of `block_size` tokens (16 by default) is the `k`-th slice of trace block `j`, so
//! its key chains every trace id up to `j` (as vLLM's block hash chains the parent's hash) and
//! adds `k`: two prompts share a KV block exactly when their ids agree up to and including its
//! trace block. Only full KV blocks inside the prompt are cacheable, as in vLLM.

use crate::rng::splitmix64;

/// The prefix keys of one request's cacheable KV blocks.
#[derive(Debug, Clone, Default)]
pub struct PrefixKeys {
    /// Chained hash of trace ids `0..=j`, for each trace block `j`.
    chain: Vec<u64>,
    kv_blocks_per_trace_block: u32,
    cacheable_blocks: u32,
}

impl PrefixKeys {
    /// Computes the keys of a prompt of `prompt_tokens` tokens whose trace blocks are `ids`,
    /// reusing this value's memory. `kv_blocks_per_trace_block` is
    /// `prefix_block_tokens / block_size` (>= 1).
    pub fn fill(
        &mut self,
        ids: &[u64],
        prompt_tokens: u32,
        block_size: u32,
        kv_blocks_per_trace_block: u32,
    ) {
        debug_assert!(kv_blocks_per_trace_block >= 1 && block_size >= 1);
        self.chain.clear();
        let mut h = 0x5052_4546_4958u64; // "PREFIX"
        for &id in ids {
            h = splitmix64(h ^ splitmix64(id));
            self.chain.push(h);
        }
        self.kv_blocks_per_trace_block = kv_blocks_per_trace_block;
        let by_ids = u64::from(kv_blocks_per_trace_block) * ids.len() as u64;
        let full_in_prompt = u64::from(prompt_tokens / block_size);
        self.cacheable_blocks = by_ids.min(full_in_prompt) as u32;
    }

    /// Keys of a request whose trace names no prefix: every full block of its `tokens` (prompt
    /// and output) gets a key no other request has (from `own`, unique per request), so only
    /// the request itself can find them again: after a preemption, vLLM's prefix cache still
    /// holds the blocks the preempted request freed until they are reused, and its recompute
    /// starts from those.
    pub fn fill_own(&mut self, own: u64, tokens: u32, block_size: u32) {
        debug_assert!(block_size >= 1);
        self.chain.clear();
        self.chain
            .push(splitmix64(0x4f57_4e50_5245_4649 ^ splitmix64(own))); // "OWNPREFI"
        self.kv_blocks_per_trace_block = u32::MAX;
        self.cacheable_blocks = tokens / block_size;
    }

    /// Forgets the keys (a request without prefix ids, or caching off).
    pub fn clear(&mut self) {
        self.chain.clear();
        self.cacheable_blocks = 0;
    }

    /// KV blocks, from the prompt's start, that have a key.
    #[inline]
    pub fn cacheable_blocks(&self) -> u32 {
        self.cacheable_blocks
    }

    /// The key of KV block `block` (< [`PrefixKeys::cacheable_blocks`]).
    #[inline]
    pub fn key(&self, block: u32) -> u64 {
        debug_assert!(block < self.cacheable_blocks);
        let per = self.kv_blocks_per_trace_block;
        splitmix64(self.chain[(block / per) as usize] ^ u64::from(block % per))
    }
}

/// Prefix-cache counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Prompt tokens of admitted requests (first admission only).
    pub prompt_tokens: u64,
    /// Of those, tokens found in the cache and not computed.
    pub cached_prompt_tokens: u64,
}

impl PrefixStats {
    /// Cached prompt tokens over prompt tokens; 0 when no prompt was admitted.
    pub fn hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.cached_prompt_tokens as f64 / self.prompt_tokens as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_share_kv_block_keys_exactly_up_to_their_first_differing_id() {
        let (mut a, mut b) = (PrefixKeys::default(), PrefixKeys::default());
        // 512-token trace blocks, 16-token KV blocks: 32 KV blocks per id.
        a.fill(&[1, 2, 3], 1536, 16, 32);
        b.fill(&[1, 2, 9], 1536, 16, 32);
        assert_eq!(a.cacheable_blocks(), 96);
        for k in 0..64 {
            assert_eq!(a.key(k), b.key(k), "block {k} lies in the shared ids");
        }
        for k in 64..96 {
            assert_ne!(a.key(k), b.key(k), "block {k} lies in differing id");
        }
        // Keys within one id differ from each other.
        assert_ne!(a.key(0), a.key(1));
    }

    #[test]
    fn equal_ids_at_different_positions_do_not_share() {
        let (mut a, mut b) = (PrefixKeys::default(), PrefixKeys::default());
        a.fill(&[5, 7], 1024, 16, 32);
        b.fill(&[7], 512, 16, 32);
        assert_ne!(a.key(32), b.key(0));
    }

    #[test]
    fn only_full_blocks_inside_the_prompt_are_cacheable() {
        let mut a = PrefixKeys::default();
        a.fill(&[1, 2], 600, 16, 32);
        assert_eq!(a.cacheable_blocks(), 600 / 16);
        a.fill(&[1], 5000, 16, 32);
        assert_eq!(
            a.cacheable_blocks(),
            32,
            "no ids beyond the first trace block"
        );
    }

    #[test]
    fn own_keys_cover_every_full_block_and_no_other_request_shares_them() {
        let (mut a, mut b) = (PrefixKeys::default(), PrefixKeys::default());
        a.fill_own(1, 100, 16);
        b.fill_own(2, 100, 16);
        assert_eq!(a.cacheable_blocks(), 6);
        for k in 0..6 {
            assert_ne!(a.key(k), b.key(k), "block {k} of two requests");
            if k > 0 {
                assert_ne!(a.key(k), a.key(k - 1));
            }
        }
        let mut again = PrefixKeys::default();
        again.fill_own(1, 100, 16);
        assert_eq!(a.key(3), again.key(3), "keys are a function of the request");
    }

    #[test]
    fn hit_rate_is_cached_over_prompt_tokens() {
        let s = PrefixStats {
            prompt_tokens: 400,
            cached_prompt_tokens: 100,
        };
        assert_eq!(s.hit_rate(), 0.25);
        assert_eq!(PrefixStats::default().hit_rate(), 0.0);
    }
}
