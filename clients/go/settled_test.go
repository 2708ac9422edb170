package rewardagent

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"rewardagent/internal/rewardv1"
)

// scripted answers SendReward from a list, one answer a call.
type scripted struct {
	rewardv1.RewardAgentClient
	answers []func() (*rewardv1.SendRewardReply, error)
	calls   int
}

func (s *scripted) SendReward(context.Context, *rewardv1.SendRewardRequest, ...grpc.CallOption) (*rewardv1.SendRewardReply, error) {
	a := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	return a()
}

func refusedWith(code rewardv1.AgentErrorCode) func() (*rewardv1.SendRewardReply, error) {
	return func() (*rewardv1.SendRewardReply, error) {
		return &rewardv1.SendRewardReply{Result: &rewardv1.SendRewardReply_Error{
			Error: &rewardv1.AgentError{Code: code, Message: "m"}}}, nil
	}
}

func lost() (*rewardv1.SendRewardReply, error) {
	return nil, status.Error(codes.DeadlineExceeded, "deadline")
}

func TestASettledSendStaysInDoubtOnceATryWasInDoubt(t *testing.T) {
	for name, later := range map[string]func() (*rewardv1.SendRewardReply, error){
		"a refusal for good":       refusedWith(rewardv1.AgentErrorCode_TOO_MANY_TOKENS),
		"back-pressure to the end": refusedWith(rewardv1.AgentErrorCode_BACKPRESSURE),
	} {
		s := &scripted{answers: []func() (*rewardv1.SendRewardReply, error){lost, later}}
		c := &Client{stub: s, Timeout: time.Second}
		_, err := c.SendSettled(context.Background(), Reward{TradeNo: "t1"}, 2*time.Second)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindInDoubt || !e.Resend() {
			t.Errorf("%s after an in-doubt try: got %v, want in doubt", name, err)
		}
		if s.calls < 2 {
			t.Errorf("%s: %d calls, want a resend", name, s.calls)
		}
	}
}

func TestASettledSendRefusedForGoodWithoutDoubtIsRefused(t *testing.T) {
	s := &scripted{answers: []func() (*rewardv1.SendRewardReply, error){refusedWith(rewardv1.AgentErrorCode_TOO_MANY_TOKENS)}}
	c := &Client{stub: s, Timeout: time.Second}
	_, err := c.SendSettled(context.Background(), Reward{TradeNo: "t1"}, time.Second)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindRefused || s.calls != 1 {
		t.Errorf("got %v after %d calls, want refused after 1", err, s.calls)
	}
}
