package rewardagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"rewardagent/internal/rewardv1"
)

// DefaultTimeout is a call's deadline when its context has none: the 50 ms a
// send_reward may take. A slower agent answers in doubt (the call may still succeed
// there): resend with the same trade number ([Client.SendSettled]), or give a longer
// deadline.
const DefaultTimeout = 50 * time.Millisecond

// MaxBatch is the most rewards one [Client.SendBatch] takes; a larger batch is refused
// whole with INVALID_ARGUMENT.
const MaxBatch = 1000

// HeldBy says which store held the reward durably when the agent answered.
type HeldBy string

// Where an issued reward was held.
const (
	HeldByStore       HeldBy = "store"
	HeldByQueue       HeldBy = "queue"
	HeldBySpool       HeldBy = "spool"
	HeldByUnspecified HeldBy = "unspecified"
)

// Issued is a durable reward: give Token to the user.
type Issued struct {
	Token   string
	TradeNo string
	Queue   string
	HeldBy  HeldBy
}

// Answer is one reward's answer in a batch: Issued, or Err when refused.
type Answer struct {
	Issued Issued
	Err    *Error
}

// Client is a connection to the host's reward agent. It is safe for concurrent use;
// keep one per process.
type Client struct {
	conn *grpc.ClientConn
	stub rewardv1.RewardAgentClient
	// Timeout is a call's deadline when its context has none (DefaultTimeout).
	Timeout time.Duration
}

// Option changes how a client is made.
type Option func(*options)

type options struct {
	timeout time.Duration
}

// WithTimeout sets the deadline of calls whose context has none.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// DialUnix makes a client of the agent on its Unix socket (the default way; the
// socket's file mode is the credential). No connection is made until the first call.
func DialUnix(socketPath string, opts ...Option) (*Client, error) {
	if socketPath == "" {
		return nil, errors.New("rewardagent: empty socket path")
	}
	// unix:// takes an absolute path (a relative one would be read as an authority).
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return nil, fmt.Errorf("rewardagent: %w", err)
	}
	// Any plain host name as the HTTP/2 authority: the agent refuses a path there.
	return dial("unix://"+abs, opts, grpc.WithAuthority("localhost"))
}

// DialTCP makes a client of the agent on loopback TCP (host:port), every call carrying
// the agent's credential (the agent's REWARD_AGENT_TOKEN).
func DialTCP(address, token string, opts ...Option) (*Client, error) {
	// A credential read from a file often ends with a newline.
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, errors.New("rewardagent: the agent's TCP listener needs its credential")
	}
	return dial("dns:///"+address, opts, grpc.WithPerRPCCredentials(bearer(token)))
}

func dial(target string, opts []Option, extra ...grpc.DialOption) (*Client, error) {
	o := options{timeout: DefaultTimeout}
	for _, f := range opts {
		f(&o)
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
	}, extra...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("rewardagent: %w", err)
	}
	return &Client{conn: conn, stub: rewardv1.NewRewardAgentClient(conn), Timeout: o.timeout}, nil
}

// bearer is the TCP listener's credential, sent as authorization metadata. The agent
// listens on loopback only, so it goes without transport security.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Close closes the connection; calls in flight end in doubt.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) deadline(ctx context.Context, least time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, max(c.Timeout, least))
}

// Send sends one reward: Issued once it is durable, else an *Error.
func (c *Client) Send(ctx context.Context, r Reward) (Issued, error) {
	ctx, cancel := c.deadline(ctx, 0)
	defer cancel()
	reply, err := c.stub.SendReward(ctx, request(r))
	if err != nil {
		return Issued{}, transport(err, r.TradeNo)
	}
	a := answer(reply, r.TradeNo)
	if a.Err != nil {
		return Issued{}, a.Err
	}
	return a.Issued, nil
}

// SendBatch sends up to MaxBatch rewards in one call: one answer per reward, in order.
// A call that fails as a call answers every reward in doubt (or invalid, when the
// agent refused the whole message).
func (c *Client) SendBatch(ctx context.Context, rewards []Reward) []Answer {
	ctx, cancel := c.deadline(ctx, time.Second)
	defer cancel()
	req := &rewardv1.SendRewardsRequest{Rewards: make([]*rewardv1.SendRewardRequest, len(rewards))}
	for i, r := range rewards {
		req.Rewards[i] = request(r)
	}
	out := make([]Answer, len(rewards))
	reply, err := c.stub.SendRewards(ctx, req)
	if err == nil && len(reply.GetReplies()) != len(rewards) {
		for i, r := range rewards {
			out[i].Err = &Error{Kind: KindInDoubt, Code: "SHORT_REPLY",
				Message: fmt.Sprintf("%d answers for %d rewards", len(reply.GetReplies()), len(rewards)),
				TradeNo: r.TradeNo}
		}
		return out
	}
	for i, r := range rewards {
		if err != nil {
			out[i].Err = transport(err, r.TradeNo)
		} else {
			out[i] = answer(reply.GetReplies()[i], r.TradeNo)
		}
	}
	return out
}

// SendSettled sends r and resends it, with the same trade number, while its answer
// may be resent (in doubt, back-pressure, a closing agent), for up to within; the
// pause between tries starts at 50 ms and doubles up to 1 s, so an overloaded agent
// is not sent more. If none settled the reward it returns the last refusal, except
// that once any try was in doubt the answer stays in doubt: a later refusal says
// nothing of the earlier try, which may still be credited.
func (c *Client) SendSettled(ctx context.Context, r Reward, within time.Duration) (Issued, error) {
	until := time.Now().Add(within)
	pause := 50 * time.Millisecond
	var doubt *Error
	settle := func(err error) error {
		var e *Error
		if doubt != nil && (!errors.As(err, &e) || e.Kind != KindInDoubt) {
			return doubt
		}
		return err
	}
	for {
		issued, err := c.Send(ctx, r)
		if err == nil {
			return issued, nil
		}
		var e *Error
		if errors.As(err, &e) && e.Kind == KindInDoubt {
			doubt = e
		}
		if !errors.As(err, &e) || !e.Resend() || time.Now().Add(pause).After(until) {
			return Issued{}, settle(err)
		}
		select {
		case <-ctx.Done():
			return Issued{}, settle(err)
		case <-time.After(pause):
		}
		pause = min(pause*2, time.Second)
	}
}

// Serving reports whether the agent takes rewards now.
func (c *Client) Serving(ctx context.Context) bool {
	ctx, cancel := c.deadline(ctx, time.Second)
	defer cancel()
	reply, err := c.stub.Health(ctx, &rewardv1.AgentHealthRequest{})
	return err == nil && reply.GetServing()
}

func request(r Reward) *rewardv1.SendRewardRequest {
	req := &rewardv1.SendRewardRequest{
		TradeNo:     r.TradeNo,
		ActivityId:  r.ActivityID,
		SceneId:     r.SceneID,
		RewardType:  r.RewardType,
		Amount:      r.Amount,
		Description: r.Description,
		Extension:   r.Extension,
	}
	if r.User != nil {
		req.User = &rewardv1.UserInfo{UserId: r.User.UserID, DeviceId: r.User.DeviceID, AppId: r.User.AppID}
	}
	return req
}

var heldBy = map[rewardv1.HeldBy]HeldBy{
	rewardv1.HeldBy_HELD_BY_STORE: HeldByStore,
	rewardv1.HeldBy_HELD_BY_QUEUE: HeldByQueue,
	rewardv1.HeldBy_HELD_BY_SPOOL: HeldBySpool,
}

func answer(reply *rewardv1.SendRewardReply, tradeNo string) Answer {
	switch res := reply.GetResult().(type) {
	case *rewardv1.SendRewardReply_Issued:
		i := res.Issued
		held, ok := heldBy[i.GetHeldBy()]
		if !ok {
			held = HeldByUnspecified
		}
		return Answer{Issued: Issued{Token: i.GetToken(), TradeNo: i.GetTradeNo(), Queue: i.GetQueue(), HeldBy: held}}
	case *rewardv1.SendRewardReply_Error:
		return Answer{Err: refusal(res.Error, tradeNo)}
	default:
		return Answer{Err: &Error{Kind: KindInDoubt, Code: "EMPTY_REPLY",
			Message: "the agent's reply held neither a reward nor an error", TradeNo: tradeNo}}
	}
}

// transport classifies a call that failed as a call.
func transport(err error, tradeNo string) *Error {
	st := status.Convert(err)
	e := &Error{Kind: KindInDoubt, Code: statusName(st.Code()), Message: st.Message(), TradeNo: tradeNo}
	switch st.Code() {
	case codes.Unauthenticated:
		// TCP without the right credential: nothing was done.
		e.Kind = KindRefused
	case codes.InvalidArgument, codes.OutOfRange:
		// The message itself was refused (a batch over the limit, over 16 MiB).
		e.Kind = KindInvalid
	}
	// Every other failure may come after the agent did its work: in doubt.
	return e
}

// statusName is a gRPC code's name as the protocol spells it (DEADLINE_EXCEEDED,
// CANCELLED), the name every client reports.
func statusName(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED"
	}
	if c > codes.Unauthenticated {
		// A number the protocol does not define: as every client names it.
		return "UNKNOWN"
	}
	var b strings.Builder
	name := c.String()
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) && unicode.IsLower(rune(name[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
