// concurrency_test: the Go client's clientv3/concurrency Mutex, Election and STM, and the
// server-side v3election and v3lock services through etcd's Go stubs, against a
// server. Built offline from Debian's golang-etcd-server-dev
// (GOPATH=/usr/share/gocode, GO111MODULE=off). Usage: concurrency_test <endpoint>.
// Prints one line per check and exits 1 on the first failure.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	"go.etcd.io/etcd/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func fail(format string, a ...interface{}) {
	fmt.Printf("FAIL: "+format+"\n", a...)
	os.Exit(1)
}

func client(ep string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		fail("connect %s: %v", ep, err)
	}
	return c
}

func session(c *clientv3.Client) *concurrency.Session {
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		fail("session: %v", err)
	}
	return s
}

func testMutex(ep string) {
	c1, c2 := client(ep), client(ep)
	defer c1.Close()
	defer c2.Close()
	s1, s2 := session(c1), session(c2)
	defer s1.Close()
	defer s2.Close()
	m1 := concurrency.NewMutex(s1, "/go-lock")
	m2 := concurrency.NewMutex(s2, "/go-lock")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m1.Lock(ctx); err != nil {
		fail("m1.Lock: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- m2.Lock(ctx) }()
	select {
	case err := <-got:
		fail("m2 acquired the lock while m1 holds it (err %v)", err)
	case <-time.After(1 * time.Second):
	}
	if err := m1.Unlock(ctx); err != nil {
		fail("m1.Unlock: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			fail("m2.Lock: %v", err)
		}
	case <-time.After(10 * time.Second):
		fail("m2 did not get the lock after m1's unlock (watch for the delete not delivered?)")
	}
	if err := m2.Unlock(ctx); err != nil {
		fail("m2.Unlock: %v", err)
	}
	fmt.Println("ok: Mutex: second locker waits, then acquires after unlock")
}

func testElection(ep string) {
	c1, c2 := client(ep), client(ep)
	defer c1.Close()
	defer c2.Close()
	s1, s2 := session(c1), session(c2)
	defer s1.Close()
	defer s2.Close()
	e1 := concurrency.NewElection(s1, "/go-elect")
	e2 := concurrency.NewElection(s2, "/go-elect")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e1.Campaign(ctx, "one"); err != nil {
		fail("e1.Campaign: %v", err)
	}
	obs := e1.Observe(ctx)
	select {
	case r := <-obs:
		if string(r.Kvs[0].Value) != "one" {
			fail("observed leader %q, want one", r.Kvs[0].Value)
		}
	case <-time.After(10 * time.Second):
		fail("Observe gave no leader")
	}
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "two") }()
	select {
	case err := <-won:
		fail("e2 won while e1 leads (err %v)", err)
	case <-time.After(1 * time.Second):
	}
	if err := e1.Proclaim(ctx, "one-again"); err != nil {
		fail("Proclaim: %v", err)
	}
	if err := e1.Resign(ctx); err != nil {
		fail("Resign: %v", err)
	}
	select {
	case err := <-won:
		if err != nil {
			fail("e2.Campaign: %v", err)
		}
	case <-time.After(10 * time.Second):
		fail("e2 did not win after e1 resigned")
	}
	seen := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for !seen["two"] {
		select {
		case r, ok := <-obs:
			if !ok {
				fail("Observe channel closed")
			}
			seen[string(r.Kvs[0].Value)] = true
		case <-deadline:
			fail("Observe did not report the new leader (saw %v)", seen)
		}
	}
	if !seen["one-again"] {
		fail("Observe missed the proclamation (saw %v)", seen)
	}
	if err := e2.Resign(ctx); err != nil {
		fail("e2.Resign: %v", err)
	}
	fmt.Println("ok: Election: campaign, observe, proclaim, resign, next candidate wins")
}

func testSTM(ep string) {
	c := client(ep)
	defer c.Close()
	if _, err := c.Put(context.Background(), "/go-stm/n", "0"); err != nil {
		fail("put: %v", err)
	}
	const workers, incs = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < incs; i++ {
				_, err := concurrency.NewSTM(c, func(s concurrency.STM) error {
					n, _ := strconv.Atoi(s.Get("/go-stm/n"))
					s.Put("/go-stm/n", strconv.Itoa(n+1))
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fail("STM: %v", err)
	}
	r, err := c.Get(context.Background(), "/go-stm/n")
	if err != nil || len(r.Kvs) != 1 {
		fail("get: %v", err)
	}
	if string(r.Kvs[0].Value) != strconv.Itoa(workers*incs) {
		fail("STM counter %s, want %d (lost updates)", r.Kvs[0].Value, workers*incs)
	}
	fmt.Printf("ok: STM: %d concurrent serializable increments, no lost update\n", workers*incs)
}

// testElectionLockServices: the server-side v3election and v3lock services through etcd's own
// generated Go stubs (v3electionpb, v3lockpb).
func testElectionLockServices(ep string) {
	c := client(ep)
	defer c.Close()
	ec := v3electionpb.NewElectionClient(c.ActiveConnection())
	lc := v3lockpb.NewLockClient(c.ActiveConnection())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := []byte("/go-svc-elect")
	r1, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Value: []byte("a")})
	if err != nil {
		fail("Election.Campaign: %v", err)
	}
	oc, err := ec.Observe(ctx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil {
		fail("Election.Observe: %v", err)
	}
	recv := func(want string) *v3electionpb.LeaderResponse {
		o, err := oc.Recv()
		if err != nil {
			fail("Election.Observe recv: %v", err)
		}
		if string(o.Kv.Value) != want {
			fail("Election.Observe: value %q, want %q", o.Kv.Value, want)
		}
		return o
	}
	recv("a")
	done := make(chan *v3electionpb.CampaignResponse, 1)
	go func() {
		r, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Value: []byte("b")})
		if err != nil {
			fail("Election.Campaign (second): %v", err)
		}
		done <- r
	}()
	select {
	case <-done:
		fail("Election.Campaign: the second candidate did not wait")
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: r1.Leader, Value: []byte("a2")}); err != nil {
		fail("Election.Proclaim: %v", err)
	}
	recv("a2")
	if _, err := ec.Resign(ctx, &v3electionpb.ResignRequest{Leader: r1.Leader}); err != nil {
		fail("Election.Resign: %v", err)
	}
	var r2 *v3electionpb.CampaignResponse
	select {
	case r2 = <-done:
	case <-time.After(10 * time.Second):
		fail("Election.Campaign: the second candidate did not win after Resign")
	}
	if o := recv("b"); string(o.Kv.Key) != string(r2.Leader.Key) {
		fail("Election.Observe: leader %q, want %q", o.Kv.Key, r2.Leader.Key)
	}
	l, err := ec.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil || string(l.Kv.Value) != "b" {
		fail("Election.Leader: %v %v", l, err)
	}
	_, err = ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: []byte("x")})
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != `"leader" field must be provided` {
		fail("Election.Proclaim without leader: %v", err)
	}
	if _, err := ec.Resign(ctx, &v3electionpb.ResignRequest{Leader: r2.Leader}); err != nil {
		fail("Election.Resign: %v", err)
	}
	fmt.Println("ok: Election service: campaign, observe, proclaim, resign, next candidate wins")

	lname := []byte("/go-svc-lock")
	k1, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: lname})
	if err != nil {
		fail("Lock.Lock: %v", err)
	}
	got := make(chan []byte, 1)
	go func() {
		k2, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: lname})
		if err != nil {
			fail("Lock.Lock (second): %v", err)
		}
		got <- k2.Key
	}()
	select {
	case <-got:
		fail("Lock.Lock: the second locker did not wait")
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: k1.Key}); err != nil {
		fail("Lock.Unlock: %v", err)
	}
	select {
	case k2 := <-got:
		if _, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: k2}); err != nil {
			fail("Lock.Unlock (second): %v", err)
		}
	case <-time.After(10 * time.Second):
		fail("Lock.Lock: the second locker did not acquire after Unlock")
	}
	fmt.Println("ok: Lock service: second locker waits, then acquires after Unlock")
}

func main() {
	if len(os.Args) != 2 {
		fmt.Println("usage: concurrency_test <endpoint>")
		os.Exit(2)
	}
	testMutex(os.Args[1])
	testElection(os.Args[1])
	testSTM(os.Args[1])
	testElectionLockServices(os.Args[1])
	fmt.Println("PASS")
}
