// Original file: proto/reward/v1/agent.proto


export interface AgentHealthReply {
  'serving'?: (boolean);
  'version'?: (string);
}

export interface AgentHealthReply__Output {
  'serving': (boolean);
  'version': (string);
}
