package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
)

// TestFetchCommittedWaitsForOpenTransaction: while a transaction that
// commits the group's offsets is open (a task's previous owner in the
// middle of its last checkpoint), the offsets a task's state is restored
// to are not read: fetchCommitted waits for the transaction's end and
// returns what it committed, not the offsets before it.
func TestFetchCommittedWaitsForOpenTransaction(t *testing.T) {
	b := newBrokerEnv(t, 1)
	cl := kafkatest.Client(t, b.brokers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Offset 5 committed outside any transaction.
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: b.in, Partition: 0, At: 5, LeaderEpoch: -1})
	if err := kadm.NewClient(cl).CommitAllOffsets(ctx, b.group, offs); err != nil {
		t.Fatalf("commit offset 5: %v", err)
	}

	// A transaction commits offset 9 and stays open.
	txn := b.txnID + "-open"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &txn, 60_000
	iresp, err := init.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(iresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("init producer id: %v", err)
	}
	pid, epoch := iresp.ProducerID, iresp.ProducerEpoch
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txn, pid, epoch, b.group
	aresp, err := add.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(aresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("add offsets to transaction: %v", err)
	}
	toc := kmsg.NewPtrTxnOffsetCommitRequest()
	toc.TransactionalID, toc.Group, toc.ProducerID, toc.ProducerEpoch, toc.Generation = txn, b.group, pid, epoch, -1
	tds, err := kadm.NewClient(cl).ListTopics(ctx, b.in)
	if err == nil {
		err = tds.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic, tt.TopicID = b.in, tds[b.in].ID // by name to v5, by id from v6
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Partition, tp.Offset = 0, 9
	tt.Partitions = append(tt.Partitions, tp)
	toc.Topics = append(toc.Topics, tt)
	tresp, err := toc.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(tresp.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("transactional offset commit: %v", err)
	}

	e := &Engine{cfg: Config{Group: b.group}, topo: Topology{Inputs: []Input{{Topic: b.in}}}, sess: atLeastOnce{cl}}
	type result struct {
		offs map[string]int64
		err  error
	}
	got := make(chan result, 1)
	go func() {
		offs, err := e.fetchCommitted(ctx, 0)
		got <- result{offs, err}
	}()
	// While the transaction is open, nothing comes back: a short wait for
	// a wrong answer (offset 5), not a synchronisation.
	select {
	case r := <-got:
		t.Fatalf("with the transaction open, fetchCommitted returned %v (err %v)", r.offs, r.err)
	case <-time.After(time.Second):
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txn, pid, epoch, true
	eresp, err := end.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(eresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("end transaction: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.offs[b.in] != 9 {
		t.Fatalf("after the transaction committed: offsets %v, want %s at 9", r.offs, b.in)
	}
}
