package rewardagent

import (
	"fmt"

	"rewardagent/internal/rewardv1"
)

// Kind is what a refusal means for the reward: see the package doc.
type Kind int

const (
	// KindInDoubt: the reward may be durable; resend it with the same trade number.
	KindInDoubt Kind = iota
	// KindInvalid: a field breaks the limits or the reward type is unknown; nothing kept.
	KindInvalid
	// KindRefused: refused before anything was kept.
	KindRefused
)

func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindRefused:
		return "refused"
	default:
		return "in doubt"
	}
}

// Error is a reward the agent did not answer as durable. Classify it by Kind (or
// Code), never by Message.
type Error struct {
	Kind Kind
	// Code is the agent's AgentErrorCode name (INVALID_REWARD, BACKPRESSURE, ...), a
	// gRPC status name for a failed call (DEADLINE_EXCEEDED, UNAVAILABLE, ...), or
	// CODE_<n> for a code number this client does not know.
	Code    string
	Message string
	// Field names the offending field of an invalid reward (user.user_id, amount, ...).
	Field   string
	TradeNo string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("reward %s %s: %s: %s", e.TradeNo, e.Kind, e.Code, e.Message)
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	return s
}

// Resend reports whether sending the same reward again, with the same trade number,
// may succeed.
func (e *Error) Resend() bool {
	switch e.Kind {
	case KindInDoubt:
		return true
	case KindRefused:
		return e.Code == "BACKPRESSURE" || e.Code == "CLOSING"
	default:
		return false
	}
}

var kinds = map[rewardv1.AgentErrorCode]Kind{
	rewardv1.AgentErrorCode_INVALID_REWARD:      KindInvalid,
	rewardv1.AgentErrorCode_UNKNOWN_REWARD_TYPE: KindInvalid,
	rewardv1.AgentErrorCode_BACKPRESSURE:        KindRefused,
	rewardv1.AgentErrorCode_CLOSING:             KindRefused,
	rewardv1.AgentErrorCode_TOO_MANY_TOKENS:     KindRefused,
	rewardv1.AgentErrorCode_SEAL_FAILED:         KindRefused,
	rewardv1.AgentErrorCode_STORE_FAILED:        KindInDoubt,
	rewardv1.AgentErrorCode_SENT_IN_DOUBT:       KindInDoubt,
}

// refusal is the Error for an AgentError; an unknown code (a newer agent) is in
// doubt, the one answer that is always safe.
func refusal(e *rewardv1.AgentError, tradeNo string) *Error {
	kind, known := kinds[e.GetCode()]
	code := fmt.Sprintf("CODE_%d", int32(e.GetCode()))
	if _, named := rewardv1.AgentErrorCode_name[int32(e.GetCode())]; named {
		// Named in the .proto (AGENT_ERROR_CODE_UNSPECIFIED too), as every client names it.
		code = e.GetCode().String()
	}
	if !known {
		kind = KindInDoubt
	}
	return &Error{Kind: kind, Code: code, Message: e.GetMessage(), Field: e.GetField(), TradeNo: tradeNo}
}
