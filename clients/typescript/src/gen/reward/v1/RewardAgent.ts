// Original file: proto/reward/v1/agent.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { AgentHealthReply as _reward_v1_AgentHealthReply, AgentHealthReply__Output as _reward_v1_AgentHealthReply__Output } from '../../reward/v1/AgentHealthReply.js';
import type { AgentHealthRequest as _reward_v1_AgentHealthRequest, AgentHealthRequest__Output as _reward_v1_AgentHealthRequest__Output } from '../../reward/v1/AgentHealthRequest.js';
import type { SendRewardReply as _reward_v1_SendRewardReply, SendRewardReply__Output as _reward_v1_SendRewardReply__Output } from '../../reward/v1/SendRewardReply.js';
import type { SendRewardRequest as _reward_v1_SendRewardRequest, SendRewardRequest__Output as _reward_v1_SendRewardRequest__Output } from '../../reward/v1/SendRewardRequest.js';
import type { SendRewardsReply as _reward_v1_SendRewardsReply, SendRewardsReply__Output as _reward_v1_SendRewardsReply__Output } from '../../reward/v1/SendRewardsReply.js';
import type { SendRewardsRequest as _reward_v1_SendRewardsRequest, SendRewardsRequest__Output as _reward_v1_SendRewardsRequest__Output } from '../../reward/v1/SendRewardsRequest.js';

export interface RewardAgentClient extends grpc.Client {
  Health(argument: _reward_v1_AgentHealthRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  Health(argument: _reward_v1_AgentHealthRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  Health(argument: _reward_v1_AgentHealthRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  Health(argument: _reward_v1_AgentHealthRequest, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  health(argument: _reward_v1_AgentHealthRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  health(argument: _reward_v1_AgentHealthRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  health(argument: _reward_v1_AgentHealthRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  health(argument: _reward_v1_AgentHealthRequest, callback: grpc.requestCallback<_reward_v1_AgentHealthReply__Output>): grpc.ClientUnaryCall;
  
  SendReward(argument: _reward_v1_SendRewardRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  SendReward(argument: _reward_v1_SendRewardRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  SendReward(argument: _reward_v1_SendRewardRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  SendReward(argument: _reward_v1_SendRewardRequest, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  sendReward(argument: _reward_v1_SendRewardRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  sendReward(argument: _reward_v1_SendRewardRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  sendReward(argument: _reward_v1_SendRewardRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  sendReward(argument: _reward_v1_SendRewardRequest, callback: grpc.requestCallback<_reward_v1_SendRewardReply__Output>): grpc.ClientUnaryCall;
  
  SendRewards(argument: _reward_v1_SendRewardsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  SendRewards(argument: _reward_v1_SendRewardsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  SendRewards(argument: _reward_v1_SendRewardsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  SendRewards(argument: _reward_v1_SendRewardsRequest, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  sendRewards(argument: _reward_v1_SendRewardsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  sendRewards(argument: _reward_v1_SendRewardsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  sendRewards(argument: _reward_v1_SendRewardsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  sendRewards(argument: _reward_v1_SendRewardsRequest, callback: grpc.requestCallback<_reward_v1_SendRewardsReply__Output>): grpc.ClientUnaryCall;
  
}

export interface RewardAgentHandlers extends grpc.UntypedServiceImplementation {
  Health: grpc.handleUnaryCall<_reward_v1_AgentHealthRequest__Output, _reward_v1_AgentHealthReply>;
  
  SendReward: grpc.handleUnaryCall<_reward_v1_SendRewardRequest__Output, _reward_v1_SendRewardReply>;
  
  SendRewards: grpc.handleUnaryCall<_reward_v1_SendRewardsRequest__Output, _reward_v1_SendRewardsReply>;
  
}

export interface RewardAgentDefinition extends grpc.ServiceDefinition {
  Health: MethodDefinition<_reward_v1_AgentHealthRequest, _reward_v1_AgentHealthReply, _reward_v1_AgentHealthRequest__Output, _reward_v1_AgentHealthReply__Output>
  SendReward: MethodDefinition<_reward_v1_SendRewardRequest, _reward_v1_SendRewardReply, _reward_v1_SendRewardRequest__Output, _reward_v1_SendRewardReply__Output>
  SendRewards: MethodDefinition<_reward_v1_SendRewardsRequest, _reward_v1_SendRewardsReply, _reward_v1_SendRewardsRequest__Output, _reward_v1_SendRewardsReply__Output>
}
