package rewardagent

import (
	"errors"
	"fmt"
	"sort"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"rewardagent/internal/rewardv1"
)

func TestEveryCodeOfTheContractHasItsKind(t *testing.T) {
	want := map[string]struct {
		kind   Kind
		resend bool
	}{
		"INVALID_REWARD":      {KindInvalid, false},
		"UNKNOWN_REWARD_TYPE": {KindInvalid, false},
		"BACKPRESSURE":        {KindRefused, true},
		"CLOSING":             {KindRefused, true},
		"TOO_MANY_TOKENS":     {KindRefused, false},
		"SEAL_FAILED":         {KindRefused, false},
		"STORE_FAILED":        {KindInDoubt, true},
		"SENT_IN_DOUBT":       {KindInDoubt, true},
	}
	var inProto []string
	for n, name := range rewardv1.AgentErrorCode_name {
		if n == 0 {
			continue
		}
		inProto = append(inProto, name)
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: a code of the .proto with no kind here", name)
			continue
		}
		e := refusal(&rewardv1.AgentError{Code: rewardv1.AgentErrorCode(n), Message: "m"}, "t1")
		if e.Kind != w.kind || e.Resend() != w.resend || e.Code != name || e.TradeNo != "t1" {
			t.Errorf("%s: got %+v resend %v", name, e, e.Resend())
		}
	}
	sort.Strings(inProto)
	if len(inProto) != len(want) {
		t.Errorf("codes in the .proto %v, here %d", inProto, len(want))
	}
}

func TestACodeNumberThisClientDoesNotKnowIsInDoubt(t *testing.T) {
	reply := &rewardv1.SendRewardReply{Result: &rewardv1.SendRewardReply_Error{
		Error: &rewardv1.AgentError{Code: 99, Message: "new"}}}
	a := answer(reply, "t1")
	if a.Err == nil || a.Err.Kind != KindInDoubt || a.Err.Code != "CODE_99" || !a.Err.Resend() {
		t.Errorf("got %+v", a.Err)
	}
}

func TestAnEmptyReplyIsInDoubt(t *testing.T) {
	a := answer(&rewardv1.SendRewardReply{}, "t1")
	if a.Err == nil || a.Err.Kind != KindInDoubt {
		t.Errorf("got %+v", a)
	}
}

func TestAFailedCallIsInDoubtUnlessTheAgentRefusedTheMessage(t *testing.T) {
	for _, c := range []struct {
		code codes.Code
		name string
		kind Kind
	}{
		{codes.DeadlineExceeded, "DEADLINE_EXCEEDED", KindInDoubt},
		{codes.Unavailable, "UNAVAILABLE", KindInDoubt},
		{codes.Internal, "INTERNAL", KindInDoubt},
		{codes.Canceled, "CANCELLED", KindInDoubt},
		{codes.Unauthenticated, "UNAUTHENTICATED", KindRefused},
		{codes.InvalidArgument, "INVALID_ARGUMENT", KindInvalid},
		{codes.OutOfRange, "OUT_OF_RANGE", KindInvalid},
	} {
		e := transport(status.Error(c.code, "x"), "t1")
		if e.Kind != c.kind || e.Code != c.name {
			t.Errorf("%v: got %+v", c.code, e)
		}
	}
	if e := transport(status.Error(codes.Code(17), "x"), "t1"); e.Code != "UNKNOWN" || e.Kind != KindInDoubt {
		t.Errorf("a status number the protocol does not define: got %+v", e)
	}
	if e := refusal(&rewardv1.AgentError{Code: 0}, "t1"); e.Code != "AGENT_ERROR_CODE_UNSPECIFIED" || e.Kind != KindInDoubt {
		t.Errorf("code 0: got %+v", e)
	}
	e := transport(fmt.Errorf("not a status"), "t1")
	if e.Kind != KindInDoubt {
		t.Errorf("a plain error: got %+v", e)
	}
	var target *Error
	if !errors.As(error(e), &target) {
		t.Error("an *Error is not found by errors.As")
	}
}
