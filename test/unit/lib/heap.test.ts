// The one heap (src/lib/heap.ts) against a sorted list, with removals and decreased keys.
import { describe, expect, it } from "vitest";
import { IndexedHeap, type HeapEntry } from "../../../src/lib/heap.js";

interface E extends HeapEntry {
  key: number;
  id: number;
}

describe("IndexedHeap", () => {
  it("pops in key order through pushes, removals and decreased keys", () => {
    let seed = 7;
    const rand = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
    const heap = new IndexedHeap<E>((e) => e.key);
    let live: E[] = [];
    for (let step = 0; step < 3000; step++) {
      const r = rand();
      if (r < 0.5 || live.length === 0) {
        const e: E = { key: Math.floor(rand() * 1000), id: step, heapIndex: -1 };
        heap.push(e);
        live.push(e);
      } else if (r < 0.65) {
        const e = live[Math.floor(rand() * live.length)] as E;
        heap.remove(e);
        heap.remove(e); // a second remove is a no-op
        live = live.filter((x) => x !== e);
      } else if (r < 0.8) {
        const e = live[Math.floor(rand() * live.length)] as E;
        e.key -= Math.floor(rand() * 500);
        heap.decreased(e);
      } else {
        const min = Math.min(...live.map((x) => x.key));
        expect(heap.peek()?.key).toBe(min);
        const e = heap.pop() as E;
        expect(e.key).toBe(min);
        expect(e.heapIndex).toBe(-1);
        live = live.filter((x) => x !== e);
      }
      expect(heap.size).toBe(live.length);
    }
    const rest: number[] = [];
    for (let e = heap.pop(); e !== undefined; e = heap.pop()) rest.push(e.key);
    expect(rest).toEqual(live.map((x) => x.key).sort((a, b) => a - b));
  });

  it("clear() empties it; removing an entry it no longer holds does nothing", () => {
    const heap = new IndexedHeap<E>((e) => e.key);
    const a: E = { key: 1, id: 1, heapIndex: -1 };
    heap.push(a);
    heap.clear();
    expect(heap.size).toBe(0);
    heap.remove(a);
    heap.decreased(a);
    expect(heap.pop()).toBeUndefined();
  });
});
