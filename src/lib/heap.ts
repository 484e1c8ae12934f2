// The one binary min-heap of the code base: the work queue's delayed keys (src/runtime/
// workqueue.ts) and the emulator's VM expiries (src/emulator/expiry-heap.ts). Neutral library:
// imports nothing from src/.
//
// Hand-written because every entry knows its own position (`heapIndex`), so that it can be
// removed, or moved earlier, in O(log n): the work queue does both on every immediate add that
// supersedes a delayed one and on every earlier addAfter of a waiting key. The maintained npm
// heaps (heap-js, @datastructures-js/heap, flatqueue, tinyqueue) either have no removal or find
// the entry with a linear search, which at 10,000 delayed keys turns a cold start quadratic.

/** What the heap keeps in each entry: its current index (-1 when not in a heap). */
export interface HeapEntry {
  heapIndex: number;
}

export class IndexedHeap<T extends HeapEntry> {
  private readonly heap: T[] = [];

  /** `keyOf`: the number the heap is ordered on (smallest first). */
  constructor(private readonly keyOf: (entry: T) => number) {}

  get size(): number {
    return this.heap.length;
  }

  peek(): T | undefined {
    return this.heap[0];
  }

  push(entry: T): void {
    entry.heapIndex = this.heap.length;
    this.heap.push(entry);
    this.up(entry.heapIndex);
  }

  pop(): T | undefined {
    const top = this.heap[0];
    if (top === undefined) return undefined;
    this.removeAt(0);
    return top;
  }

  /** Removes `entry` if it is in this heap (a no-op otherwise). */
  remove(entry: T): void {
    if (this.heap[entry.heapIndex] === entry) this.removeAt(entry.heapIndex);
  }

  /** Restores the order after `entry`'s key was lowered. */
  decreased(entry: T): void {
    if (this.heap[entry.heapIndex] === entry) this.up(entry.heapIndex);
  }

  clear(): void {
    this.heap.length = 0;
  }

  private removeAt(i: number): void {
    const h = this.heap;
    const removed = h[i] as T;
    const last = h.pop() as T;
    removed.heapIndex = -1;
    if (i < h.length) {
      h[i] = last;
      last.heapIndex = i;
      this.down(i);
      this.up(last.heapIndex);
    }
  }

  private up(i: number): void {
    const h = this.heap;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (this.keyOf(h[p] as T) <= this.keyOf(h[i] as T)) break;
      this.swap(i, p);
      i = p;
    }
  }

  private down(i: number): void {
    const h = this.heap;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < h.length && this.keyOf(h[l] as T) < this.keyOf(h[m] as T)) m = l;
      if (r < h.length && this.keyOf(h[r] as T) < this.keyOf(h[m] as T)) m = r;
      if (m === i) return;
      this.swap(i, m);
      i = m;
    }
  }

  private swap(a: number, b: number): void {
    const h = this.heap;
    const x = h[a] as T;
    const y = h[b] as T;
    h[a] = y;
    h[b] = x;
    x.heapIndex = b;
    y.heapIndex = a;
  }
}
