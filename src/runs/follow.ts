// Following a step's output file as the step writes it (for `logs`): each look prints what came
// since the last one, masked (GrowingOutput). The step's `exit` file, written last, says the
// output is whole: the look that finds it prints all that is left.
//
// agentd publishes no ranged download: a look asks the file's size (files/info) and, if it
// grew, downloads the whole file, keeping only its end. So what came between two looks (by the
// download's end) is printed whole up to LOOK_BYTES and a masked value's length; beyond that,
// all but its last LOOK_BYTES is skipped, with a line saying how much; and a file found larger
// than MAX_FOLLOWED_BYTES is not downloaded any more (the caller prints what the run keeps
// instead). A step whose output file is gone before its end was read (its run's directory
// removed when the run ended) is never done here: the caller prints the rest as the run keeps it.
import type { FileEnds } from "../service/agentd.js";
import { GrowingOutput, afterCut } from "./output.js";
import { exitFile, outputFile } from "./script.js";

/** The most of a step's output one look prints; more between two looks is skipped. */
export const LOOK_BYTES = 1024 * 1024;
/** A step's output file this large is not downloaded any more (each download is all of it). */
export const MAX_FOLLOWED_BYTES = 64 * 1024 * 1024;
/**
 * Downloads are paced to read at most this many bytes a second on average: a step appending to
 * a large file is not downloaded whole every second (a 32 MiB file: every 2 s).
 */
export const READ_BYTES_PER_SECOND = 16 * 1024 * 1024;
/** What was printed is kept up to this size, to match the output the run keeps with (StepFollower.printed). */
const MATCHED_BYTES = 1024 * 1024;

export interface FollowLimits {
  lookBytes: number;
  maxFollowedBytes: number;
  readBytesPerSecond: number;
  /** Milliseconds, for the pacing. */
  now(): number;
}

// A monotonic clock: a wall clock set back would hold the pacing for as long.
const DEFAULT_LIMITS: FollowLimits = { lookBytes: LOOK_BYTES, maxFollowedBytes: MAX_FOLLOWED_BYTES, readBytesPerSecond: READ_BYTES_PER_SECOND, now: () => performance.now() };

/** What a follower reads of the VM (AgentdClient's calls). */
export interface StepFiles {
  fileSize(path: string): Promise<number | undefined>;
  downloadFileEnds(path: string, headBytes: number, tailBytes: number): Promise<FileEnds | undefined>;
}

export interface Look {
  /** To print (stdout). */
  text: string;
  /** To say (stderr), once. */
  note?: string;
}

export class StepFollower {
  private readonly output: GrowingOutput;
  /** Bytes of the file pushed to `output` so far. */
  private offset = 0;
  /** All of the output has been printed (its exit file was there, and the output read to its end). */
  done = false;
  /** The file is too large to download (MAX_FOLLOWED_BYTES). */
  tooLarge = false;
  /** What was printed, while short enough to match with, and nothing was skipped; else undefined. */
  printed: string | undefined = "";
  /** No download before this time (the pacing): ms. */
  private nextRead = 0;
  private readonly limits: FollowLimits;

  constructor(
    private readonly vm: StepFiles,
    /** The step's directory in the VM (stepPath). */
    private readonly dir: string,
    secrets: Iterable<string>,
    limits: Partial<FollowLimits> = {},
  ) {
    this.output = new GrowingOutput(secrets);
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  /**
   * Reads what came since the last look; when the step has ended (its exit file), all of it.
   * A look sooner than the pacing allows after the last download asks nothing, unless it is the
   * `last` (the step has ended, as status says).
   */
  async look(last = false): Promise<Look> {
    const began = this.limits.now();
    if (this.done || this.tooLarge || (!last && began < this.nextRead)) return { text: "" };
    // The exit file first: once it is there, the output file is whole.
    const ended = (await this.vm.fileSize(exitFile(this.dir))) !== undefined;
    const size = await this.vm.fileSize(outputFile(this.dir));
    // Not made yet (the step is starting), or gone (its run's directory removed): even with
    // its exit file seen, what it wrote since the last look is not known.
    if (size === undefined) return { text: "" };
    if (size > this.limits.maxFollowedBytes) {
      this.tooLarge = true;
      this.printed = undefined;
      return { text: "", note: `its output is over ${Math.floor(this.limits.maxFollowedBytes / (1024 * 1024))} MiB and is not read live any more` };
    }
    let ends: FileEnds | undefined = { head: Buffer.alloc(0), tail: Buffer.alloc(0), size };
    if (size > this.offset) {
      // As much as a look prints, whatever the size just asked said: the step writes on between
      // that answer and the download, and a tail cut to what was new then would not reach back
      // to what was printed, skipping bytes that a look had room for.
      ends = await this.vm.downloadFileEnds(outputFile(this.dir), 0, this.limits.lookBytes + this.output.longest);
      if (ends === undefined) return { text: "" };
      // Under a second's worth of reading: every look may read (looks come about once a second).
      const pause = (ends.size / this.limits.readBytesPerSecond) * 1000;
      this.nextRead = pause < 1000 ? 0 : began + pause;
    }
    const text = this.take(ends, ended);
    if (ended) this.done = true;
    this.remember(text);
    return { text };
  }

  /**
   * The new bytes of `ends` (the file's last bytes, as many as were asked for, or the whole
   * file), masked. Where they do not reach back to what was read before (more came than a look
   * prints, by the time it was read), the bytes between are skipped, and at least
   * the longest value's length of what was read goes before what is printed, so that a value
   * across the cut is masked whole.
   */
  private take(ends: FileEnds, ended: boolean): string {
    const { size } = ends;
    const tail = ends.tail;
    const tailStart = size - tail.length;
    if (size <= this.offset) return ended ? this.output.push(Buffer.alloc(0), { ended }) : "";
    if (tailStart <= this.offset) {
      const fresh = tail.subarray(this.offset - tailStart);
      this.offset = size;
      return this.output.push(fresh, { ended });
    }
    const from = Math.min(tail.length, Math.max(this.output.longest, tail.length - this.limits.lookBytes));
    const skipped = tailStart + from - this.offset + this.output.held;
    this.offset = size;
    this.printed = undefined;
    return `\n[... ${skipped} bytes of output skipped here ...]\n` + this.output.push(tail, { ended, from });
  }

  /**
   * The rest of an ended step's output, from `kept` (its output as the run keeps it), where its
   * file could not be read to its end: what follows what was printed, if the kept text starts
   * with it; else, said, the kept tail (the kept text was cut), else all of it.
   */
  restFrom(kept: string): Look {
    if (this.printed !== undefined && kept.startsWith(this.printed)) return { text: kept.slice(this.printed.length) };
    const keptTail = afterCut(kept);
    if (keptTail !== undefined) return { text: keptTail, note: "the end of its output could not be read live; the last of it, as the run keeps it:" };
    return { text: kept, note: "the end of its output could not be read live; all of it, as the run keeps it:" };
  }

  private remember(text: string): void {
    if (this.printed === undefined || text === "") return;
    this.printed = this.printed.length + text.length > MATCHED_BYTES ? undefined : this.printed + text;
  }
}
