// Bounded parallelism for bulk work against the API server (creating thousands of objects,
// stripping finalizers).

/** Runs `fn` over `items` with at most `concurrency` in flight; resolves when all are done. */
export async function forEachLimit<T>(items: readonly T[], concurrency: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      await fn(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
}
