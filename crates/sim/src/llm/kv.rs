//! The paged KV cache of one LLM instance: a fixed number of blocks of `block_size` tokens each.
//!
//! A block is in one of three states:
//! - **in use**: held by one or more running sequences (reference count above 0);
//! - **cached**: free, but still holding a registered prefix key, so a later request with the
//!   same prefix can take it back without recomputing it; cached blocks are evicted least
//!   recently freed first when a block is needed;
//! - **free**: holding nothing.
//!
//! Every operation is O(1) (a stack of free blocks, an intrusive doubly linked LRU list of cached
//! blocks, and a map from prefix key to block), amortized: a block's bookkeeping is created the
//! first time the block is handed out, so memory follows the blocks a run uses, never the
//! configured `num_gpu_blocks` (which may be far larger than any trace needs). Blocks are handed
//! out in the same order either way: a released block first, else the lowest never used.

/// Marks "no block" in the LRU links and "no key" in the key table.
const NIL: u32 = u32::MAX;
const NO_KEY: u64 = u64::MAX;

/// A block's index in the cache.
pub type BlockId = u32;

/// The KV cache of one instance.
#[derive(Debug, Clone)]
pub struct KvCache {
    block_size: u32,
    /// Blocks configured; blocks `refcount.len()..total` have never been handed out.
    total: u32,
    refcount: Vec<u32>,
    key: Vec<u64>,
    lru_prev: Vec<u32>,
    lru_next: Vec<u32>,
    lru_head: u32,
    lru_tail: u32,
    cached: u32,
    /// Released blocks holding no key (blocks never handed out are not listed).
    free: Vec<BlockId>,
    by_key: BlockMap,
    in_use: u32,
}

impl KvCache {
    /// A cache of `blocks` empty blocks of `block_size` tokens (both at least 1).
    pub fn new(blocks: u32, block_size: u32) -> KvCache {
        assert!(blocks >= 1 && block_size >= 1, "validated by the scenario");
        KvCache {
            block_size,
            total: blocks,
            refcount: Vec::new(),
            key: Vec::new(),
            lru_prev: Vec::new(),
            lru_next: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            cached: 0,
            free: Vec::new(),
            by_key: BlockMap::new(),
            in_use: 0,
        }
    }

    /// Blocks handed out at least once (those with bookkeeping).
    #[inline]
    fn touched(&self) -> u32 {
        self.refcount.len() as u32
    }

    /// Creates the bookkeeping of the lowest block never handed out; `None` when every block
    /// has been.
    fn touch_next(&mut self) -> Option<BlockId> {
        let block = self.touched();
        if block == self.total {
            return None;
        }
        self.refcount.push(0);
        self.key.push(NO_KEY);
        self.lru_prev.push(NIL);
        self.lru_next.push(NIL);
        Some(block)
    }

    /// Blocks in the cache.
    #[inline]
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Blocks held by running sequences.
    #[inline]
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Blocks that [`KvCache::allocate`] can hand out now (free plus evictable cached ones).
    #[inline]
    pub fn available(&self) -> u32 {
        self.free.len() as u32 + self.cached + (self.total - self.touched())
    }

    /// Blocks needed to hold `tokens` tokens.
    #[inline]
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.block_size))
    }

    /// The block registered under `key`, in use or cached.
    #[inline]
    pub fn lookup(&self, key: u64) -> Option<BlockId> {
        self.by_key.get(key)
    }

    /// True when `block` is free but cached (taking it back uses up one available block).
    #[inline]
    pub fn is_cached(&self, block: BlockId) -> bool {
        self.refcount[block as usize] == 0
    }

    /// Takes a reference to a registered block (a prefix-cache hit).
    pub fn acquire(&mut self, block: BlockId) {
        let b = block as usize;
        debug_assert!(self.key[b] != NO_KEY, "only registered blocks are shared");
        if self.refcount[b] == 0 {
            self.lru_unlink(block);
            self.cached -= 1;
            self.in_use += 1;
        }
        self.refcount[b] += 1;
        self.check();
    }

    /// Takes an empty block: a free one, else the least recently cached one (forgetting its key).
    /// `None` when every block is in use.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let block = match self.free.pop().or_else(|| self.touch_next()) {
            Some(b) => b,
            None => {
                let b = self.lru_head;
                if b == NIL {
                    return None;
                }
                self.lru_unlink(b);
                self.cached -= 1;
                let key = std::mem::replace(&mut self.key[b as usize], NO_KEY);
                self.by_key.remove(key);
                b
            }
        };
        debug_assert_eq!(self.refcount[block as usize], 0);
        self.refcount[block as usize] = 1;
        self.in_use += 1;
        self.check();
        Some(block)
    }

    /// Drops one reference; a block nobody holds becomes cached (if registered) or free.
    pub fn release(&mut self, block: BlockId) {
        let b = block as usize;
        assert!(
            self.refcount[b] > 0,
            "block {block} released more than taken"
        );
        self.refcount[b] -= 1;
        if self.refcount[b] == 0 {
            self.in_use -= 1;
            if self.key[b] == NO_KEY {
                self.free.push(block);
            } else {
                self.lru_push_back(block);
                self.cached += 1;
            }
        }
        self.check();
    }

    /// Registers a full, computed block under its prefix `key`, so later requests can reuse it.
    /// A key already registered keeps its first block (this one stays private).
    pub fn register(&mut self, block: BlockId, key: u64) {
        let key = if key == NO_KEY { NO_KEY - 1 } else { key };
        if self.key[block as usize] != NO_KEY {
            return;
        }
        if self.by_key.insert_if_vacant(key, block) {
            self.key[block as usize] = key;
        }
    }

    fn lru_unlink(&mut self, block: BlockId) {
        let b = block as usize;
        let (prev, next) = (self.lru_prev[b], self.lru_next[b]);
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.lru_next[prev as usize] = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.lru_prev[next as usize] = prev;
        }
        self.lru_prev[b] = NIL;
        self.lru_next[b] = NIL;
    }

    fn lru_push_back(&mut self, block: BlockId) {
        let b = block as usize;
        self.lru_prev[b] = self.lru_tail;
        self.lru_next[b] = NIL;
        if self.lru_tail == NIL {
            self.lru_head = block;
        } else {
            self.lru_next[self.lru_tail as usize] = block;
        }
        self.lru_tail = block;
    }

    /// The block budget holds: in use + cached + free == total, so in use never exceeds it.
    #[inline]
    fn check(&self) {
        assert!(
            self.in_use + self.cached + self.free.len() as u32 + (self.total - self.touched())
                == self.total,
            "KV blocks: {} in use + {} cached + {} free + {} never used != {} total",
            self.in_use,
            self.cached,
            self.free.len(),
            self.total - self.touched(),
            self.total
        );
    }
}

/// Prefix key to block: open addressing with linear probing and backward-shift deletion (no
/// tombstones, so lookups stay short under the cache's constant insert/evict churn). Keys are
/// already uniformly mixed hashes, so their low bits index the table directly. It doubles when
/// half full, so it never fills and probe runs stay short.
#[derive(Debug, Clone)]
struct BlockMap {
    keys: Vec<u64>,
    blocks: Vec<BlockId>,
    mask: usize,
    len: usize,
}

impl BlockMap {
    /// Slots of a new map.
    const INITIAL_SLOTS: usize = 16;

    fn new() -> BlockMap {
        BlockMap {
            keys: vec![NO_KEY; Self::INITIAL_SLOTS],
            blocks: vec![NIL; Self::INITIAL_SLOTS],
            mask: Self::INITIAL_SLOTS - 1,
            len: 0,
        }
    }

    /// Doubles the table and re-inserts every entry.
    #[cold]
    fn grow(&mut self) {
        let slots = 2 * self.keys.len();
        let keys = std::mem::replace(&mut self.keys, vec![NO_KEY; slots]);
        let blocks = std::mem::replace(&mut self.blocks, vec![NIL; slots]);
        self.mask = slots - 1;
        for (key, block) in keys.into_iter().zip(blocks) {
            if key != NO_KEY {
                let mut i = key as usize & self.mask;
                while self.keys[i] != NO_KEY {
                    i = (i + 1) & self.mask;
                }
                self.keys[i] = key;
                self.blocks[i] = block;
            }
        }
    }

    #[inline]
    fn get(&self, key: u64) -> Option<BlockId> {
        let mut i = key as usize & self.mask;
        loop {
            match self.keys[i] {
                k if k == key => return Some(self.blocks[i]),
                NO_KEY => return None,
                _ => i = (i + 1) & self.mask,
            }
        }
    }

    /// Inserts `key -> block` unless `key` is present; true when inserted.
    #[inline]
    fn insert_if_vacant(&mut self, key: u64, block: BlockId) -> bool {
        debug_assert!(key != NO_KEY);
        if 2 * (self.len + 1) > self.keys.len() {
            self.grow();
        }
        let mut i = key as usize & self.mask;
        loop {
            match self.keys[i] {
                k if k == key => return false,
                NO_KEY => {
                    self.keys[i] = key;
                    self.blocks[i] = block;
                    self.len += 1;
                    return true;
                }
                _ => i = (i + 1) & self.mask,
            }
        }
    }

    /// Removes `key` (present), shifting later entries of its probe run back into the hole.
    #[inline]
    fn remove(&mut self, key: u64) {
        let mut hole = key as usize & self.mask;
        while self.keys[hole] != key {
            assert!(
                self.keys[hole] != NO_KEY,
                "removing a key that is not mapped"
            );
            hole = (hole + 1) & self.mask;
        }
        let mut i = hole;
        loop {
            i = (i + 1) & self.mask;
            let k = self.keys[i];
            if k == NO_KEY {
                break;
            }
            // Move k into the hole unless its home lies cyclically in (hole, i].
            let home = k as usize & self.mask;
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                self.keys[hole] = k;
                self.blocks[hole] = self.blocks[i];
                hole = i;
            }
        }
        self.keys[hole] = NO_KEY;
        self.blocks[hole] = NIL;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_stops_at_the_block_budget() {
        let mut kv = KvCache::new(3, 16);
        let blocks: Vec<_> = std::iter::from_fn(|| kv.allocate()).collect();
        assert_eq!(blocks.len(), 3);
        assert_eq!(kv.in_use(), 3);
        assert_eq!(kv.available(), 0);
        kv.release(blocks[1]);
        assert_eq!(kv.allocate(), Some(blocks[1]));
        assert_eq!(kv.allocate(), None);
    }

    #[test]
    fn released_registered_blocks_stay_cached_until_evicted_lru() {
        let mut kv = KvCache::new(2, 16);
        let a = kv.allocate().unwrap();
        let b = kv.allocate().unwrap();
        kv.register(a, 10);
        kv.register(b, 20);
        kv.release(a);
        kv.release(b);
        assert_eq!((kv.in_use(), kv.available()), (0, 2));
        assert_eq!(kv.lookup(10), Some(a));
        // A hit takes the block back out of the LRU list.
        kv.acquire(a);
        assert_eq!(kv.available(), 1);
        // The only evictable block is b: it is reused and its key forgotten.
        assert_eq!(kv.allocate(), Some(b));
        assert_eq!(kv.lookup(20), None);
        assert_eq!(kv.lookup(10), Some(a));
        kv.release(a);
        kv.release(b);
        assert_eq!(kv.lookup(10), Some(a), "a is still cached");
        assert_eq!(kv.available(), 2);
    }

    #[test]
    fn least_recently_freed_cached_block_is_evicted_first() {
        let mut kv = KvCache::new(3, 16);
        let ids: Vec<_> = (0..3).map(|_| kv.allocate().unwrap()).collect();
        for (i, &b) in ids.iter().enumerate() {
            kv.register(b, 100 + i as u64);
        }
        kv.release(ids[2]);
        kv.release(ids[0]);
        kv.release(ids[1]);
        assert_eq!(kv.allocate(), Some(ids[2]));
        assert_eq!(kv.allocate(), Some(ids[0]));
        assert_eq!(kv.lookup(101), Some(ids[1]));
    }

    #[test]
    fn block_map_agrees_with_a_btree_map_under_churn() {
        use rand::{RngExt, SeedableRng};
        let mut rng = crate::rng::SimRng::seed_from_u64(3);
        let mut map = BlockMap::new();
        let mut reference = std::collections::BTreeMap::new();
        for step in 0..20_000u32 {
            // Few distinct low bits, so probe runs collide and wrap around.
            let key = rng.random_range(0..200u64) * 1024 + rng.random_range(0..3u64);
            if reference.len() < 64 && rng.random_bool(0.5) {
                let inserted = map.insert_if_vacant(key, step);
                assert_eq!(inserted, !reference.contains_key(&key));
                reference.entry(key).or_insert(step);
            } else if let Some(&k) = reference.keys().next() {
                map.remove(k);
                reference.remove(&k);
            }
            if step % 97 == 0 {
                for k in 0..200u64 * 1024 + 3 {
                    if k % 1024 < 3 {
                        assert_eq!(map.get(k), reference.get(&k).copied(), "key {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_huge_cache_allocates_bookkeeping_only_for_the_blocks_used() {
        let mut kv = KvCache::new(u32::MAX, 16);
        assert_eq!(kv.available(), u32::MAX);
        let a = kv.allocate().unwrap();
        let b = kv.allocate().unwrap();
        assert_eq!((a, b), (0, 1), "the lowest blocks first");
        kv.release(a);
        assert_eq!(kv.allocate(), Some(a), "a released block before a new one");
        assert_eq!(kv.refcount.len(), 2, "bookkeeping for the two blocks used");
        assert_eq!(kv.available(), u32::MAX - 2);
    }

    #[test]
    fn block_map_grows_past_its_first_size_and_keeps_every_entry() {
        let mut map = BlockMap::new();
        for k in 0..10_000u64 {
            assert!(map.insert_if_vacant(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k as u32));
        }
        for k in 0..10_000u64 {
            assert_eq!(
                map.get(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                Some(k as u32)
            );
        }
        assert!(map.keys.len() >= 20_000);
    }

    #[test]
    fn shared_block_is_freed_only_by_its_last_holder() {
        let mut kv = KvCache::new(1, 16);
        let a = kv.allocate().unwrap();
        kv.register(a, 7);
        kv.acquire(a);
        kv.release(a);
        assert_eq!(kv.in_use(), 1);
        kv.release(a);
        assert_eq!(kv.in_use(), 0);
        assert!(kv.is_cached(a));
    }
}
