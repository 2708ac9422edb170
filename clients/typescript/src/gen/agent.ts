import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { AgentError as _reward_v1_AgentError, AgentError__Output as _reward_v1_AgentError__Output } from './reward/v1/AgentError.js';
import type { AgentHealthReply as _reward_v1_AgentHealthReply, AgentHealthReply__Output as _reward_v1_AgentHealthReply__Output } from './reward/v1/AgentHealthReply.js';
import type { AgentHealthRequest as _reward_v1_AgentHealthRequest, AgentHealthRequest__Output as _reward_v1_AgentHealthRequest__Output } from './reward/v1/AgentHealthRequest.js';
import type { DeadLetter as _reward_v1_DeadLetter, DeadLetter__Output as _reward_v1_DeadLetter__Output } from './reward/v1/DeadLetter.js';
import type { IssuedReward as _reward_v1_IssuedReward, IssuedReward__Output as _reward_v1_IssuedReward__Output } from './reward/v1/IssuedReward.js';
import type { RewardAgentClient as _reward_v1_RewardAgentClient, RewardAgentDefinition as _reward_v1_RewardAgentDefinition } from './reward/v1/RewardAgent.js';
import type { RewardEvent as _reward_v1_RewardEvent, RewardEvent__Output as _reward_v1_RewardEvent__Output } from './reward/v1/RewardEvent.js';
import type { SendRewardReply as _reward_v1_SendRewardReply, SendRewardReply__Output as _reward_v1_SendRewardReply__Output } from './reward/v1/SendRewardReply.js';
import type { SendRewardRequest as _reward_v1_SendRewardRequest, SendRewardRequest__Output as _reward_v1_SendRewardRequest__Output } from './reward/v1/SendRewardRequest.js';
import type { SendRewardsReply as _reward_v1_SendRewardsReply, SendRewardsReply__Output as _reward_v1_SendRewardsReply__Output } from './reward/v1/SendRewardsReply.js';
import type { SendRewardsRequest as _reward_v1_SendRewardsRequest, SendRewardsRequest__Output as _reward_v1_SendRewardsRequest__Output } from './reward/v1/SendRewardsRequest.js';
import type { UserInfo as _reward_v1_UserInfo, UserInfo__Output as _reward_v1_UserInfo__Output } from './reward/v1/UserInfo.js';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  reward: {
    v1: {
      AgentError: MessageTypeDefinition<_reward_v1_AgentError, _reward_v1_AgentError__Output>
      AgentErrorCode: EnumTypeDefinition
      AgentHealthReply: MessageTypeDefinition<_reward_v1_AgentHealthReply, _reward_v1_AgentHealthReply__Output>
      AgentHealthRequest: MessageTypeDefinition<_reward_v1_AgentHealthRequest, _reward_v1_AgentHealthRequest__Output>
      DeadLetter: MessageTypeDefinition<_reward_v1_DeadLetter, _reward_v1_DeadLetter__Output>
      HeldBy: EnumTypeDefinition
      IssuedReward: MessageTypeDefinition<_reward_v1_IssuedReward, _reward_v1_IssuedReward__Output>
      RewardAgent: SubtypeConstructor<typeof grpc.Client, _reward_v1_RewardAgentClient> & { service: _reward_v1_RewardAgentDefinition }
      RewardEvent: MessageTypeDefinition<_reward_v1_RewardEvent, _reward_v1_RewardEvent__Output>
      SendRewardReply: MessageTypeDefinition<_reward_v1_SendRewardReply, _reward_v1_SendRewardReply__Output>
      SendRewardRequest: MessageTypeDefinition<_reward_v1_SendRewardRequest, _reward_v1_SendRewardRequest__Output>
      SendRewardsReply: MessageTypeDefinition<_reward_v1_SendRewardsReply, _reward_v1_SendRewardsReply__Output>
      SendRewardsRequest: MessageTypeDefinition<_reward_v1_SendRewardsRequest, _reward_v1_SendRewardsRequest__Output>
      UserInfo: MessageTypeDefinition<_reward_v1_UserInfo, _reward_v1_UserInfo__Output>
    }
  }
}

