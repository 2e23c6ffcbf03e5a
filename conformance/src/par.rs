//! Data parallelism, optional. With the `parallel` feature (on by default) this is rayon; with
//! `default-features = false` the same calls run sequentially on std iterators. Results never
//! depend on which: every value is exact or correctly rounded and the order is kept.

#[cfg(feature = "parallel")]
pub use rayon::prelude::*;

/// Run two closures, in parallel where the `parallel` feature is on.
#[cfg(feature = "parallel")]
pub fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    rayon::join(a, b)
}

/// Run two closures, in parallel where the `parallel` feature is on.
#[cfg(not(feature = "parallel"))]
pub fn join<A, B>(a: impl FnOnce() -> A, b: impl FnOnce() -> B) -> (A, B) {
    (a(), b())
}

/// Worker threads in use (1 without the `parallel` feature).
pub fn current_num_threads() -> usize {
    #[cfg(feature = "parallel")]
    {
        rayon::current_num_threads()
    }
    #[cfg(not(feature = "parallel"))]
    {
        1
    }
}

/// Run `f` on a pool of `threads` workers (the global pool when `None`; sequentially without
/// the `parallel` feature). `Err` names `--threads` when the pool cannot be built.
pub fn with_threads<T: Send>(
    threads: Option<usize>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, crate::error::ConfError> {
    match threads {
        None => Ok(f()),
        #[cfg(feature = "parallel")]
        Some(n) => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| crate::error::ConfError::field("--threads", e.to_string()))?;
            Ok(pool.install(f))
        }
        #[cfg(not(feature = "parallel"))]
        Some(0) => Err(crate::error::ConfError::field(
            "--threads",
            "must be at least 1",
        )),
        #[cfg(not(feature = "parallel"))]
        Some(_) => Ok(f()),
    }
}

#[cfg(not(feature = "parallel"))]
mod seq {
    /// `par_iter()` on slices: the std iterator.
    pub trait IntoParallelRefIterator<'a> {
        /// Item type.
        type Iter: Iterator;
        /// The sequential iterator.
        fn par_iter(&'a self) -> Self::Iter;
    }
    impl<'a, I: 'a + ?Sized> IntoParallelRefIterator<'a> for I
    where
        &'a I: IntoIterator,
    {
        type Iter = <&'a I as IntoIterator>::IntoIter;
        fn par_iter(&'a self) -> Self::Iter {
            self.into_iter()
        }
    }
    /// `par_iter_mut()` on slices and vectors: the std `iter_mut()`.
    pub trait IntoParallelRefMutIterator<'a> {
        /// Iterator type.
        type Iter: Iterator;
        /// The sequential iterator.
        fn par_iter_mut(&'a mut self) -> Self::Iter;
    }
    impl<'a, I: 'a + ?Sized> IntoParallelRefMutIterator<'a> for I
    where
        &'a mut I: IntoIterator,
    {
        type Iter = <&'a mut I as IntoIterator>::IntoIter;
        fn par_iter_mut(&'a mut self) -> Self::Iter {
            self.into_iter()
        }
    }
    /// `into_par_iter()`: the std `into_iter()`.
    pub trait IntoParallelIterator {
        /// Iterator type.
        type Iter: Iterator;
        /// The sequential iterator.
        fn into_par_iter(self) -> Self::Iter;
    }
    impl<I: IntoIterator> IntoParallelIterator for I {
        type Iter = I::IntoIter;
        fn into_par_iter(self) -> Self::Iter {
            self.into_iter()
        }
    }
    /// `par_chunks_mut()` on slices: `chunks_mut()`.
    pub trait ParallelSliceMut<T> {
        /// The sequential iterator.
        fn par_chunks_mut(&mut self, n: usize) -> std::slice::ChunksMut<'_, T>;
    }
    impl<T> ParallelSliceMut<T> for [T] {
        fn par_chunks_mut(&mut self, n: usize) -> std::slice::ChunksMut<'_, T> {
            self.chunks_mut(n)
        }
    }
    /// rayon's `for_each_init` on any iterator: one state, made once, for every item.
    pub trait ForEachInit: Iterator + Sized {
        /// `f(&mut state, item)` for every item, `state = init()` once.
        fn for_each_init<S, I: Fn() -> S, F: Fn(&mut S, Self::Item)>(self, init: I, f: F) {
            let mut state = init();
            for item in self {
                f(&mut state, item);
            }
        }
    }
    impl<It: Iterator> ForEachInit for It {}
    /// rayon's `find_map_first` on any iterator: the std `find_map` (the first in order).
    pub trait FindMapFirst: Iterator + Sized {
        /// The first `Some(f(item))`.
        fn find_map_first<B, F: FnMut(Self::Item) -> Option<B>>(mut self, f: F) -> Option<B> {
            self.find_map(f)
        }
    }
    impl<It: Iterator> FindMapFirst for It {}
    /// `par_chunks()` on slices: `chunks()`.
    pub trait ParallelSlice<T> {
        /// The sequential iterator.
        fn par_chunks(&self, n: usize) -> std::slice::Chunks<'_, T>;
    }
    impl<T> ParallelSlice<T> for [T] {
        fn par_chunks(&self, n: usize) -> std::slice::Chunks<'_, T> {
            self.chunks(n)
        }
    }
}
#[cfg(not(feature = "parallel"))]
pub use seq::*;
