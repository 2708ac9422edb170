// Original file: proto/reward/v1/agent.proto


export interface AgentHealthRequest {
}

export interface AgentHealthRequest__Output {
}
