// A min-heap of (expiresAt, id) so that finding expired VMs costs O(expired · log n) instead
// of a scan of every VM on each request. Renewals push a new entry rather than moving the old
// one; stale entries are recognised (and skipped) by the caller when they surface.
//
// Built on the code base's one heap (src/lib/heap.ts, which the work queue needs for its
// O(log n) removals) rather than an npm heap: one heap to trust, and no dependency for it.
import { IndexedHeap, type HeapEntry } from "../lib/heap.js";

interface Entry extends HeapEntry {
  at: number;
  id: string;
}

export class ExpiryHeap {
  private readonly heap = new IndexedHeap<Entry>((e) => e.at);

  get size(): number {
    return this.heap.size;
  }

  push(at: number, id: string): void {
    this.heap.push({ at, id, heapIndex: -1 });
  }

  /** Pop every entry due at or before `now`. */
  popDue(now: number): Entry[] {
    const due: Entry[] = [];
    for (let e = this.heap.peek(); e !== undefined && e.at <= now; e = this.heap.peek()) due.push(this.heap.pop() as Entry);
    return due;
  }

  clear(): void {
    this.heap.clear();
  }
}
