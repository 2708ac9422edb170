package rewardagent_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"rewardagent"
)

func ExampleRedEnvelopeRain_Grab() {
	rain := rewardagent.RedEnvelopeRain{ActivityID: "cny2027", RewardType: "cash"}
	r := rain.Grab(rewardagent.User{UserID: "u42"}, 3, 888)
	fmt.Println(r.TradeNo, r.Amount, r.Description)
	// Output: cny2027:rain:3:u42 888 red envelope
}

// A service sends a reward and shows the user its token; an invalid reward is fixed,
// never resent as it is. (Needs an agent on the socket: compiled, not run.)
func ExampleClient_SendSettled() {
	agent, err := rewardagent.DialUnix("/run/reward-agent/agent.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer agent.Close()
	rain := rewardagent.RedEnvelopeRain{ActivityID: "cny2027", RewardType: "cash"}
	reward := rain.Grab(rewardagent.User{UserID: "u42"}, 3, 888) // cny2027:rain:3:u42
	issued, err := agent.SendSettled(context.Background(), reward, time.Second)
	var refused *rewardagent.Error
	switch {
	case err == nil:
		fmt.Println("show the user:", issued.Token)
	case errors.As(err, &refused) && refused.Kind == rewardagent.KindInvalid:
		fmt.Println("fix the request:", refused.Field, refused)
	default:
		fmt.Println("not settled yet, resend later with the same trade number:", err)
	}
}
