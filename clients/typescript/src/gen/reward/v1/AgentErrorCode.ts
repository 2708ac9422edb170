// Original file: proto/reward/v1/agent.proto

export const AgentErrorCode = {
  AGENT_ERROR_CODE_UNSPECIFIED: 'AGENT_ERROR_CODE_UNSPECIFIED',
  INVALID_REWARD: 'INVALID_REWARD',
  UNKNOWN_REWARD_TYPE: 'UNKNOWN_REWARD_TYPE',
  BACKPRESSURE: 'BACKPRESSURE',
  TOO_MANY_TOKENS: 'TOO_MANY_TOKENS',
  CLOSING: 'CLOSING',
  STORE_FAILED: 'STORE_FAILED',
  SENT_IN_DOUBT: 'SENT_IN_DOUBT',
  SEAL_FAILED: 'SEAL_FAILED',
} as const;

export type AgentErrorCode =
  | 'AGENT_ERROR_CODE_UNSPECIFIED'
  | 0
  | 'INVALID_REWARD'
  | 1
  | 'UNKNOWN_REWARD_TYPE'
  | 2
  | 'BACKPRESSURE'
  | 3
  | 'TOO_MANY_TOKENS'
  | 4
  | 'CLOSING'
  | 5
  | 'STORE_FAILED'
  | 6
  | 'SENT_IN_DOUBT'
  | 7
  | 'SEAL_FAILED'
  | 8

export type AgentErrorCode__Output = typeof AgentErrorCode[keyof typeof AgentErrorCode]
