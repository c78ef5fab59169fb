package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("bench: write JSON: %w", err)
	}
	return nil
}

// printSim prints bench sim's tables.
func printSim(out io.Writer, r simResult) error {
	n := r.Regions * r.Replicas
	fmt.Fprintf(out, "\n%d regions × %d replicas = %d replicas, copies %d, %d likes over %d items\n",
		r.Regions, r.Replicas, n, r.Copies, r.Likes, r.Items)
	fmt.Fprintf(out, "ready %s; loaded in %s (%.0f likes/s); every replicator converged and %d items exact at every holder %s later\n",
		secs(r.ReadySeconds), secs(r.Load.Seconds), r.Load.LikesPerSec, r.Load.Checked, secs(r.Load.ConvergedSeconds))

	s := r.Stored
	fmt.Fprintf(out, "\nstored: live sstable bytes per replica after a full compaction (an empty store: %d)\n", s.Empty)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "min\tmedian\tmax\tall replicas\tper like (all copies)\tper like copy\tmedian replica per like loaded\t")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.2f\t\n", s.Min, s.Median, s.Max, s.Total, s.PerLike, s.PerLikeCopy, s.PerLikeAtReplica)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(out, "\nwire: message payload bytes (NATS framing not included); fast path = deltas and heartbeats,")
	fmt.Fprintln(out, "  delivered once per receiving replica; anti-entropy = requests and replies")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tseconds\tfast published\tfast delivered\tdelivered msgs\tAE digests\tdigest exchanges\tAE pages\tfast per like\tAE per like\t")
	row := func(name string, sec float64, w wireBytes, likes int) {
		perLike, aePerLike := "-", "-"
		if likes > 0 {
			perLike = fmt.Sprintf("%.1f", float64(w.Delivered)/float64(likes))
			aePerLike = fmt.Sprintf("%.1f", float64(w.AE())/float64(likes))
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", name, sec, w.Published, w.Delivered, w.DeliveredMsgs,
			w.Digests, w.DigestMsgs, w.Pages, perLike, aePerLike)
	}
	row("load", r.Load.Seconds, r.Load.Wire, r.Likes)
	row("load to converged", r.Load.ConvergedSeconds, r.Load.Tail, 0)
	row("idle", r.Idle.Seconds, r.Idle.Wire, 0)
	row("heal until converged", r.Cut.ConvergedSeconds, r.Cut.Wire, r.Cut.CutLikes+r.Cut.RestLikes)
	if err := tw.Flush(); err != nil {
		return err
	}

	c := r.Cut
	fmt.Fprintf(out, "\nheal: %s cut from every other region for %s with %d likes/s a side (%d on its side, %d on the other, %d items);\n",
		c.Region, secs(c.Seconds), c.Rate, c.CutLikes, c.RestLikes, c.Touched)
	fmt.Fprintf(out, "  after the heal every replicator converged in %s, and %d touched items read exact at every holder in %s\n",
		secs(c.ConvergedSeconds), c.Checked, secs(c.ExactSeconds))
	if c.DifferingBytes > 0 {
		fmt.Fprintf(out, "  entries the heal brought (at every replica, held after and not before): %d, %d bytes stored;\n", c.DifferingEntries, c.DifferingBytes)
		fmt.Fprintf(out, "  anti-entropy bytes per byte of them: %.1f (pages alone %.1f)\n",
			float64(c.Wire.AE())/float64(c.DifferingBytes), float64(c.Wire.Pages)/float64(c.DifferingBytes))
	}
	printPages(out, c.Wire)

	if m := r.Move; m != nil {
		fmt.Fprintf(out, "\nmove: %s from %d to %d copies (%d shard copies gain a holder, nothing written meanwhile): every joining replica synced in %s;\n",
			m.Region, m.CopiesFrom, m.CopiesTo, m.ShardCopies, secs(m.Seconds))
		fmt.Fprintf(out, "  %d bytes of shard data moved (the region's stores, compacted, before and after), %d bytes on the wire\n",
			m.StoredBytes, m.Wire.total())
		fmt.Fprintf(out, "  (segment pages %d, digests %d, fast path %d); %d items checked at their new holders\n",
			m.Wire.Pages, m.Wire.Digests, m.Wire.Delivered, m.Checked)
		printPages(out, m.Wire)
		fmt.Fprintf(out, "  per GB of shard data at this rate: %.0f s, %.2f GB on the wire\n", m.SecondsPerGB, m.WireBytesPerGB/1e9)
	}

	im := r.Idle.Model
	fmt.Fprintf(out, "\nidle digest exchanges per replica per anti-entropy interval: %.0f bytes measured (%d replicas, %s idle, every %s)\n",
		r.Idle.DigestBytesPerReplica, n, secs(r.Idle.Seconds), secs(r.AEInterval))
	fmt.Fprintf(out, "  computed for %s over the run's maps: %d peers, %.1f shards shared with each on average: %d bytes idle,\n",
		im.Replica, im.Peers, im.Shared, im.Idle)
	fmt.Fprintf(out, "  %d with every shared segment differing; every digest to every peer (before shared-shard exchanges): %d\n",
		im.Full, im.Before)

	ib := r.Idle.Beats
	fmt.Fprintf(out, "\nidle fast path per replica: %.0f bytes/s measured (%d replicas, %s idle)\n",
		float64(r.Idle.Wire.Delivered)/max(r.Idle.Seconds, 1e-9)/float64(max(n, 1)), n, secs(r.Idle.Seconds))
	fmt.Fprintf(out, "  computed for %s over the run's maps: of %d peers it follows %d of its region and %d sharing a keyed shard,\n",
		ib.Replica, ib.Peers, ib.OwnRegion, ib.Sharing)
	fmt.Fprintf(out, "  and hears %d region summaries: %.0f bytes/s (every heartbeat to every replica: %.0f)\n",
		ib.Summaries, ib.BytesPerSec, ib.EveryBeat)

	fmt.Fprintln(out, "\none item's vector by its number of writers (one entry each):")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "writers\tstored bytes\tper entry\tAE page bytes\t")
	for _, v := range r.Vectors {
		fmt.Fprintf(tw, "%d\t%.0f\t%.1f\t%d\t\n", v.Writers, v.StoredBytes, v.StoredBytes/float64(v.Writers), v.PageBytes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	p := r.Projection
	fmt.Fprintf(out, "\nprojection to %d replicas per region (%d in all), same regions, copies and likes:\n", p.Replicas, r.Regions*p.Replicas)
	fmt.Fprintf(out, "  bytes per replica   ~ likes × bytes per like copy × copies / replicas = %d × %.1f × %d / %d = %.0f\n",
		r.Likes, s.PerLikeCopy, r.Copies, p.Replicas, p.BytesPerReplica)
	fmt.Fprintf(out, "  fast path per like  ~ unchanged (a like reaches the regions × copies = %d holders of its shard): %.1f bytes\n",
		r.Regions*r.Copies, p.FastBytesPerLike)
	w := r.Idle.Wire
	pm := p.Model
	fmt.Fprintf(out, "  idle digests        ~ N × one replica's exchanges an interval, computed at N=%d: %d peers, %.2f shards shared with each on average,\n",
		r.Regions*p.Replicas, pm.Peers, pm.Shared)
	fmt.Fprintf(out, "                        %d bytes idle (%d with every shared segment differing; every digest to every peer: %d)\n",
		pm.Idle, pm.Full, pm.Before)
	fmt.Fprintf(out, "                        = %.0f bytes/s every %s\n", p.DigestBytesPerSec, secs(r.AEInterval))
	pb := p.Beats
	fmt.Fprintf(out, "  heartbeats          ~ N × one replica's, computed at N=%d: of %d peers it follows %d of its region and %d sharing a keyed shard\n",
		r.Regions*p.Replicas, pb.Peers, pb.OwnRegion, pb.Sharing)
	fmt.Fprintf(out, "                        (%.0f bytes every %s each), and %d region summaries of %.0f bytes:\n",
		pb.BeatBytes, secs(simHeartbeat.Seconds()), pb.Summaries, pb.SummaryB)
	fmt.Fprintf(out, "                        %.0f bytes/s a replica (every heartbeat to every replica: %.0f) = %.0f bytes/s\n",
		pb.BytesPerSec, pb.EveryBeat, p.HeartbeatBytesPerSec)
	fmt.Fprintf(out, "  (measured here at N=%d, %s idle: %.0f digest + %.0f fast-path bytes/s)\n", n, secs(r.Idle.Seconds),
		float64(w.Digests)/max(r.Idle.Seconds, 1e-9), float64(w.Delivered)/max(r.Idle.Seconds, 1e-9))
	if m := r.Move; m != nil {
		fmt.Fprintf(out, "  moving 1 GB of shard data: ~%.0f s and %.2f GB on the wire at the rate measured here (one process, shared cores)\n",
			m.SecondsPerGB, m.WireBytesPerGB/1e9)
	}
	return nil
}

// printPages prints what a phase's segment page bytes were made of.
func printPages(out io.Writer, w wireBytes) {
	fmt.Fprintf(out, "  segment pages by what was asked: part digests %d, diff requests %d, diff answers %d, whole segments %d\n",
		w.PageParts, w.PageDiffAsks, w.PageDiffs, w.PageWhole)
}
